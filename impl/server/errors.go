package server

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// toGRPCError maps an error of the store to the gRPC error etcd gives for
// the same condition (etcd v3rpc/util.go:45-47,98-108 togRPCError): the
// mvcc errors to rpctypes' errors, a context error to its own code, and
// anything else to codes.Unknown with its text.
func toGRPCError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, mvcc.ErrEmptyKey):
		return rpctypes.ErrGRPCEmptyKey
	case errors.Is(err, mvcc.ErrDuplicateKey):
		return rpctypes.ErrGRPCDuplicateKey
	case errors.Is(err, mvcc.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, mvcc.ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, mvcc.ErrNoSpace):
		return rpctypes.ErrGRPCNoSpace
	case errors.Is(err, mvcc.ErrLeaseNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, mvcc.ErrLeaseExist):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, mvcc.ErrLeaseTTLTooLarge):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	case errors.Is(err, mvcc.ErrClosed), errors.Is(err, watchhub.ErrClosed):
		// The store is closing: the server is stopping (etcd's
		// ErrGRPCStopped, which clients retry).
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, err.Error())
}
