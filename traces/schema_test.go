package traces

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestSchemaMatchesWireFormat: every field the reader and writer know is in
// trace.schema.json under the right definition, and the schema names no
// field they do not know. The schema cannot drift from the code.
func TestSchemaMatchesWireFormat(t *testing.T) {
	b, err := os.ReadFile("trace.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("trace.schema.json: %v", err)
	}
	for def, v := range map[string]any{
		"header": Header{}, "kv": wireKV{}, "range": wireRange{}, "put": wirePut{}, "delete": wireDelete{},
		"compare": wireCompare{}, "txn_op": wireOp{}, "request": wireRequest{}, "range_response": wireRangeResp{},
		"put_response": wirePutResp{}, "delete_response": wireDeleteResp{}, "response": wireResponse{},
		"op": opRecord{}, "watch_request": wireWatchRequest{}, "watch": watchRecord{}, "event": wireEvent{},
		"watch_response": watchResponseRecord{}, "annotation": annotationRecord{},
		"object": wireObject{}, "status": wireStatus{}, "list_options": wireListOptions{}, "list_result": wireListResult{},
		"k8s_list": k8sListRecord{}, "watch_options": wireWatchOptions{}, "k8s_watch": k8sWatchRecord{}, "k8s_event": wireK8sEvent{},
		"k8s_watch_event": k8sWatchEventRecord{}, "k8s_watch_end": k8sWatchEndRecord{}, "notification": wireNotification{},
		"informer_entry": wireInformerEntry{}, "informer": informerRecord{}, "informer_cache": informerCacheRecord{},
		"request_range": wireRangeRequest{}, "watch_response_body": wireWatchResp{}, "progress_request": progressRequestRecord{},
		"lease": leaseRecord{}, "lease_request": wireLeaseRequest{}, "lease_response": wireLeaseResponse{},
	} {
		d, ok := schema.Defs[def]
		if !ok {
			t.Errorf("the schema has no definition %q", def)
			continue
		}
		var fields []string
		for _, f := range reflect.VisibleFields(reflect.TypeOf(v)) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous || name == "" || name == "-" {
				continue
			}
			fields = append(fields, name)
			if _, ok := d.Properties[name]; !ok {
				t.Errorf("schema %q lacks field %q", def, name)
			}
		}
		for name := range d.Properties {
			if !contains(fields, name) {
				t.Errorf("schema %q has field %q that the format does not know", def, name)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
