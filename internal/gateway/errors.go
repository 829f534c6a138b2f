package gateway

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/quotacenter/quota-center/internal/quota"
)

// errClass is how the gateway treats a domain error.
type errClass int

const (
	classInternal    errClass = iota // a bug or a broken store: INTERNAL
	classInvalid                     // a bad input: INVALID_ARGUMENT
	classNotFound                    // a resource without a policy: NOT_FOUND
	classUnavailable                 // the stores could not decide: the policy's failMode
)

// classify is the one place a domain error becomes a gRPC outcome. It
// reads the quota sentinels with errors.Is (quota.CodeOf, a
// transport-neutral code, replaces it once it is on main).
func classify(err error) errClass {
	var ve *quota.ValidationError
	switch {
	case errors.As(err, &ve):
		return classInvalid
	case errors.Is(err, quota.ErrResourceNotFound):
		return classNotFound
	case errors.Is(err, quota.ErrUnavailable), errors.Is(err, quota.ErrCircuitOpen):
		return classUnavailable
	}
	return classInternal
}

// grpcCode is the status code of a class (classUnavailable answers
// UNAVAILABLE when the closed answer is not over_limit).
func (c errClass) grpcCode() codes.Code {
	switch c {
	case classInvalid:
		return codes.InvalidArgument
	case classNotFound:
		return codes.NotFound
	case classUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}
