package contract_test

import (
	"net/http"

	"github.com/quotacenter/quota-center/internal/contract/apiclient"
)

// parsers are the generated client's answer decoders, by operationId.
var parsers = map[string]func(*http.Response) (any, error){
	"listAudit":          func(r *http.Response) (any, error) { return apiclient.ParseListAuditResponse(r) },
	"listPolicies":       func(r *http.Response) (any, error) { return apiclient.ParseListPoliciesResponse(r) },
	"deletePolicy":       func(r *http.Response) (any, error) { return apiclient.ParseDeletePolicyResponse(r) },
	"getPolicy":          func(r *http.Response) (any, error) { return apiclient.ParseGetPolicyResponse(r) },
	"patchPolicy":        func(r *http.Response) (any, error) { return apiclient.ParsePatchPolicyResponse(r) },
	"putPolicy":          func(r *http.Response) (any, error) { return apiclient.ParsePutPolicyResponse(r) },
	"releaseBuffer":      func(r *http.Response) (any, error) { return apiclient.ParseReleaseBufferResponse(r) },
	"listGrants":         func(r *http.Response) (any, error) { return apiclient.ParseListGrantsResponse(r) },
	"addGrant":           func(r *http.Response) (any, error) { return apiclient.ParseAddGrantResponse(r) },
	"voidGrant":          func(r *http.Response) (any, error) { return apiclient.ParseVoidGrantResponse(r) },
	"listLines":          func(r *http.Response) (any, error) { return apiclient.ParseListLinesResponse(r) },
	"deleteLine":         func(r *http.Response) (any, error) { return apiclient.ParseDeleteLineResponse(r) },
	"putLine":            func(r *http.Response) (any, error) { return apiclient.ParsePutLineResponse(r) },
	"listPoolEvents":     func(r *http.Response) (any, error) { return apiclient.ParseListPoolEventsResponse(r) },
	"getPools":           func(r *http.Response) (any, error) { return apiclient.ParseGetPoolsResponse(r) },
	"putPools":           func(r *http.Response) (any, error) { return apiclient.ParsePutPoolsResponse(r) },
	"listReclaims":       func(r *http.Response) (any, error) { return apiclient.ParseListReclaimsResponse(r) },
	"cancelReclaim":      func(r *http.Response) (any, error) { return apiclient.ParseCancelReclaimResponse(r) },
	"confirmReclaim":     func(r *http.Response) (any, error) { return apiclient.ParseConfirmReclaimResponse(r) },
	"resetPeriod":        func(r *http.Response) (any, error) { return apiclient.ParseResetPeriodResponse(r) },
	"reconcile":          func(r *http.Response) (any, error) { return apiclient.ParseReconcileResponse(r) },
	"listSessions":       func(r *http.Response) (any, error) { return apiclient.ParseListSessionsResponse(r) },
	"forceFinishSession": func(r *http.Response) (any, error) { return apiclient.ParseForceFinishSessionResponse(r) },
	"getUsage":           func(r *http.Response) (any, error) { return apiclient.ParseGetUsageResponse(r) },
	"healthz":            func(r *http.Response) (any, error) { return apiclient.ParseHealthzResponse(r) },
	"backendHealth":      func(r *http.Response) (any, error) { return apiclient.ParseBackendHealthResponse(r) },
	"metrics":            func(r *http.Response) (any, error) { return apiclient.ParseMetricsResponse(r) },
	"applyQuota":         func(r *http.Response) (any, error) { return apiclient.ParseApplyQuotaResponse(r) },
	"finishSession":      func(r *http.Response) (any, error) { return apiclient.ParseFinishSessionResponse(r) },
	"heartbeatSession":   func(r *http.Response) (any, error) { return apiclient.ParseHeartbeatSessionResponse(r) },
	"getQuotaStatus":     func(r *http.Response) (any, error) { return apiclient.ParseGetQuotaStatusResponse(r) },
	"readyz":             func(r *http.Response) (any, error) { return apiclient.ParseReadyzResponse(r) },
}
