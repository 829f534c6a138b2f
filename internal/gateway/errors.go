package gateway

import (
	"google.golang.org/grpc/codes"

	"github.com/quotacenter/quota-center/internal/quota"
)

// grpcCode is the one mapping of the domain's error classification
// (quota.CodeOf) to a gRPC status code.
func grpcCode(err error) codes.Code {
	switch quota.CodeOf(err) {
	case quota.CodeInvalidArgument:
		return codes.InvalidArgument
	case quota.CodeResourceNotFound, quota.CodeSessionNotFound, quota.CodeNotFound:
		return codes.NotFound
	case quota.CodeSessionNotActive, quota.CodePolicyInUse:
		return codes.FailedPrecondition
	case quota.CodeSessionConflict, quota.CodeConflict:
		return codes.Aborted
	case quota.CodePermissionDenied:
		return codes.PermissionDenied
	case quota.CodeQuotaExhausted:
		return codes.ResourceExhausted
	case quota.CodeBackendUnavailable, quota.CodeCircuitOpen:
		return codes.Unavailable
	}
	return codes.Internal
}
