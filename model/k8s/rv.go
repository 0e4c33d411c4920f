package k8s

import (
	"errors"
	"fmt"
)

// Semantic is what a read may return, by the Kubernetes API concepts
// ("Resource versions"): docs/SPEC.md §4.1.
type Semantic string

const (
	// MostRecent: the state at a revision no older than every revision
	// committed before the request was sent (a consistent read).
	MostRecent Semantic = "MostRecent"
	// Any: the state at any revision that ever existed, possibly much older
	// than what the client has already seen.
	Any Semantic = "Any"
	// NotOlderThan: the state at a revision ≥ the one requested.
	NotOlderThan Semantic = "NotOlderThan"
	// Exact: the state at exactly the requested revision, or 410 Gone.
	Exact Semantic = "Exact"
	// Continuation: the next page, at the revision of the first.
	Continuation Semantic = "Continuation"
)

// ListOptions are the options of a list that concern resourceVersion.
type ListOptions struct {
	ResourceVersion      string
	ResourceVersionMatch string // "", "Exact" or "NotOlderThan"
	Limit                int64
	Continue             string
}

// ErrInvalid wraps a request the API server rejects with 400 Bad Request.
var ErrInvalid = errors.New("invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ListSemantic returns what a list with o may return (docs/SPEC.md §4.1,
// the API concepts table), or an error wrapping ErrInvalid for the
// combinations the API server rejects (apimachinery's ValidateListOptions).
func ListSemantic(o ListOptions) (Semantic, int64, error) {
	rv, ok := ParseRV(o.ResourceVersion)
	if !ok {
		return "", 0, invalid("resourceVersion %q is not a resource version", o.ResourceVersion)
	}
	if o.Limit < 0 {
		return "", 0, invalid("limit %d is negative", o.Limit)
	}
	switch o.ResourceVersionMatch {
	case "":
	case "Exact", "NotOlderThan":
		if o.ResourceVersion == "" {
			return "", 0, invalid("resourceVersionMatch %s requires a resourceVersion", o.ResourceVersionMatch)
		}
		if o.Continue != "" {
			return "", 0, invalid("resourceVersionMatch is forbidden with continue")
		}
	default:
		return "", 0, invalid("resourceVersionMatch %q is neither Exact nor NotOlderThan", o.ResourceVersionMatch)
	}
	switch {
	case o.Continue != "":
		if rv != 0 {
			return "", 0, invalid("continue is forbidden with resourceVersion %s", o.ResourceVersion)
		}
		return Continuation, 0, nil
	case o.ResourceVersionMatch == "Exact":
		if rv == 0 {
			return "", 0, invalid("resourceVersionMatch Exact is forbidden with resourceVersion \"0\"")
		}
		return Exact, rv, nil
	case o.ResourceVersion == "":
		return MostRecent, 0, nil
	case rv == 0:
		return Any, 0, nil
	case o.ResourceVersionMatch == "" && o.Limit > 0:
		return Exact, rv, nil // the legacy meaning of a limited list at a revision
	}
	return NotOlderThan, rv, nil
}

// WatchOptions are the options of a watch that concern resourceVersion.
type WatchOptions struct {
	ResourceVersion      string
	ResourceVersionMatch string
	// SendInitialEvents is nil when the client left it unset.
	SendInitialEvents   *bool
	AllowWatchBookmarks bool
}

// WatchStart says how a watch starts (docs/SPEC.md §4.3).
type WatchStart struct {
	// InitialState: the stream opens with a synthetic ADDED for every
	// object of a state, whose revision the Semantic bounds (From for
	// NotOlderThan); changes after that revision follow.
	InitialState bool
	Semantic     Semantic
	// From is the revision the watch starts after (for Exact: changes
	// strictly after From are delivered).
	From int64
	// EndBookmark: the initial state ends with one BOOKMARK annotated
	// k8s.io/initial-events-end at the state's revision (WatchList).
	EndBookmark bool
}

// WatchSemantic returns how a watch with o starts, or an error wrapping
// ErrInvalid. Note that a watch with resourceVersion unset and no
// sendInitialEvents is "Get State and Start at Most Recent" in the API
// documentation, but the apiserver serves it from its watch cache without a
// quorum read (kubernetes#123935, #129930): the model gives it Any.
func WatchSemantic(o WatchOptions) (WatchStart, error) {
	rv, ok := ParseRV(o.ResourceVersion)
	if !ok {
		return WatchStart{}, invalid("resourceVersion %q is not a resource version", o.ResourceVersion)
	}
	if o.SendInitialEvents == nil {
		if o.ResourceVersionMatch != "" {
			return WatchStart{}, invalid("resourceVersionMatch on a watch requires sendInitialEvents")
		}
		if rv == 0 {
			return WatchStart{InitialState: true, Semantic: Any}, nil
		}
		return WatchStart{Semantic: Exact, From: rv}, nil
	}
	if o.ResourceVersionMatch != "NotOlderThan" {
		return WatchStart{}, invalid("sendInitialEvents requires resourceVersionMatch NotOlderThan")
	}
	if !*o.SendInitialEvents {
		if rv == 0 {
			return WatchStart{Semantic: Any}, nil
		}
		return WatchStart{Semantic: Exact, From: rv}, nil
	}
	start := WatchStart{InitialState: true, EndBookmark: o.AllowWatchBookmarks}
	switch {
	case o.ResourceVersion == "":
		start.Semantic = MostRecent
	case rv == 0:
		start.Semantic = Any
	default:
		start.Semantic, start.From = NotOlderThan, rv
	}
	return start, nil
}
