package informer

import (
	"errors"
	"fmt"
)

// StatusError is an API error status, as the API server answers a request
// it refuses (apimachinery's StatusError, reduced to what list and watch
// need).
type StatusError struct {
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Reason, e.Message) }

// The codes and reasons this package answers with.
const (
	CodeBadRequest = 400
	CodeNotFound   = 404
	CodeConflict   = 409
	CodeGone       = 410
	CodeTimeout    = 504

	ReasonBadRequest    = "BadRequest"
	ReasonNotFound      = "NotFound"
	ReasonAlreadyExists = "AlreadyExists"
	ReasonConflict      = "Conflict"
	// ReasonExpired answers a read of history that compaction removed
	// ("too old resource version").
	ReasonExpired = "Expired"
	// ReasonTimeout with a message starting "Too large resource version"
	// answers a read at a revision the server has not reached.
	ReasonTimeout = "Timeout"
)

func statusf(code int, reason, format string, args ...any) *StatusError {
	return &StatusError{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *StatusError {
	return statusf(CodeBadRequest, ReasonBadRequest, format, args...)
}

// expired is the 410 of a compacted revision (apiserver's
// NewResourceExpired).
func expired(rev, compacted int64) *StatusError {
	return statusf(CodeGone, ReasonExpired, "too old resource version: %d (%d)", rev, compacted)
}

// tooLarge is the answer to a read at a revision the store has not reached
// (apiserver's NewTooLargeResourceVersionError).
func tooLarge(rev, current int64) *StatusError {
	return statusf(CodeTimeout, ReasonTimeout, "Too large resource version: %d, current: %d", rev, current)
}

func statusOf(err error) *StatusError {
	var s *StatusError
	if errors.As(err, &s) {
		return s
	}
	return nil
}

// IsExpired reports whether err is a 410 Gone: the revision asked for is
// compacted; the client must relist.
func IsExpired(err error) bool {
	s := statusOf(err)
	return s != nil && s.Code == CodeGone
}

// IsTooLargeResourceVersion reports whether err says the server has not
// reached the revision asked for.
func IsTooLargeResourceVersion(err error) bool {
	s := statusOf(err)
	return s != nil && s.Code == CodeTimeout && s.Reason == ReasonTimeout
}

// IsBadRequest reports whether err is a 400: invalid options.
func IsBadRequest(err error) bool {
	s := statusOf(err)
	return s != nil && s.Code == CodeBadRequest
}

// IsNotFound reports whether err is a 404.
func IsNotFound(err error) bool {
	s := statusOf(err)
	return s != nil && s.Code == CodeNotFound
}

// IsConflict reports whether err is a 409: the object exists already, or
// changed since the resourceVersion the write was based on.
func IsConflict(err error) bool {
	s := statusOf(err)
	return s != nil && s.Code == CodeConflict
}
