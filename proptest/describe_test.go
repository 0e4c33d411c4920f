package proptest

import (
	"encoding/json"
	"fmt"

	"github.com/watchspec/watchspec/model/kv"
)

// describeReq and describeResp print requests and responses readably
// (following pointers), for failure messages.
func describeReq(r kv.Request) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func describeResp(r kv.Response) string {
	if r.Err != nil {
		return fmt.Sprintf("error %q", r.Err)
	}
	r.Err = nil
	b, _ := json.Marshal(r)
	return string(b)
}
