package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Options configure a Service.
type Options struct {
	Config  *Config
	Quota   Quota
	Keys    *Keys // nil: no API key asked (dev mode, or mTLS alone)
	Log     *zap.Logger
	Metrics *Metrics
	Now     func() time.Time // default time.Now
}

// Service implements envoy.service.ratelimit.v3.RateLimitService.
type Service struct {
	rls.UnimplementedRateLimitServiceServer
	cfg     *Config
	q       Quota
	keys    *Keys
	log     *zap.Logger
	m       *Metrics
	now     func() time.Time
	creator *creator
}

// NewService makes the service. Start loads the existing per-value
// resources (for the caps) and warns of mapped resources without a policy.
func NewService(o Options) *Service {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{cfg: o.Config, q: o.Quota, keys: o.Keys, log: o.Log, m: o.Metrics, now: o.Now, creator: newCreator(o.Quota)}
}

// Start counts the resources the bounded mappings already made and logs a
// warning for each fixed resource or template without a policy (they are
// answered NOT_FOUND until an operator creates them). A policy store that
// does not answer (quota.ErrUnavailable, quota.ErrCircuitOpen: a MySQL
// outage at start, issue 22 §11) is logged, not an error: the count is
// made again before the first per-value resource is looked up (until then
// such descriptors are answered UNAVAILABLE), and the rest is served as
// during any MySQL outage. Other errors are returned.
func (s *Service) Start(ctx context.Context) error {
	if err := s.creator.load(ctx, s.cfg); err != nil {
		if !errors.Is(err, quota.ErrUnavailable) && !errors.Is(err, quota.ErrCircuitOpen) {
			return fmt.Errorf("gateway: list policies: %w", err)
		}
		s.log.Warn("gateway: policy store unreachable at start; the per-value resources are counted once it answers",
			zap.Error(err))
		return nil
	}
	s.cfg.walk(func(d *Descriptor) {
		for _, r := range []string{d.Template, fixed(d)} {
			if r == "" {
				continue
			}
			if _, err := s.q.Policy(ctx, r); errors.Is(err, quota.ErrResourceNotFound) {
				s.log.Warn("gateway mapping names a resource with no policy: create it (PUT /admin/policies/{resource})",
					zap.String("resource", r), zap.Int("line", d.Line), zap.String("config", s.cfg.Path))
			}
		}
	})
	return nil
}

func fixed(d *Descriptor) string {
	if d.perValue {
		return ""
	}
	return d.Resource
}

// slot is one request descriptor on its way to an answer.
type slot struct {
	node     *Descriptor
	resource string
	hits     int64
	rejected bool // outside the allow-list or past the cap
	item     int  // index in the ChargeRequest, −1 when not charged
}

// ShouldRateLimit answers one Envoy rate limit request: it maps each
// descriptor to a resource and charges their hits all or nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	start := s.now()
	domain := "unknown"
	if s.cfg.Domains[req.GetDomain()] != nil {
		domain = req.GetDomain()
	}
	resp, result, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		result = resultError
	}
	s.m.requests.WithLabelValues(domain, result).Inc()
	s.m.duration.WithLabelValues(domain).Observe(s.now().Sub(start).Seconds())
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, string, error) {
	key, err := s.keys.authenticate(ctx)
	if err != nil {
		return nil, "", err
	}
	dom, err := s.validate(req)
	if err != nil {
		return nil, "", err
	}
	slots, creq, err := s.plan(ctx, dom, req, key)
	if err != nil {
		return nil, "", err
	}
	rejected := false
	for _, sl := range slots {
		rejected = rejected || (sl.rejected && !sl.node.Shadow)
	}
	var cres quota.ChargeResponse
	if len(creq.Items) > 0 && !rejected {
		cres, err = s.q.Charge(ctx, creq)
		if err != nil {
			return s.failure(dom, slots, err)
		}
	}
	if cres.FailOpen {
		s.log.Warn("gateway request let through: the stores could not decide and every policy involved is failMode OPEN",
			zap.String("domain", dom.Name), zap.Bool("recorded", cres.FailOpenRecorded), zap.Error(cres.FailOpenCause))
	}
	return s.answer(dom, slots, creq, cres, rejected)
}

// validate checks what does not depend on the mapping: a known domain, at
// least one descriptor, entries with keys, hits within 2^53−1.
func (s *Service) validate(req *rls.RateLimitRequest) (*Domain, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain is empty: set domain in the ratelimit filter's configuration")
	}
	dom := s.cfg.Domains[req.GetDomain()]
	if dom == nil {
		// The mapping file's path is the server's business: the log has it.
		s.log.Info("gateway request for a domain not in the mapping", zap.String("domain", quota.ClipMessage(req.GetDomain())),
			zap.String("config", s.cfg.Path))
		return nil, status.Errorf(codes.NotFound, "domain %q is not configured on this gateway (configured domains: %s)",
			req.GetDomain(), strings.Join(s.domainNames(), ", "))
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no descriptors: the route's rate_limits actions produced none")
	}
	if len(ds) > quota.MaxChargeItems {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d per request", len(ds), quota.MaxChargeItems)
	}
	for i, d := range ds {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d] has no entries", i)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d].key is empty", i, j)
			}
		}
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: is_negative_hits is not supported: usage is charged, never given back, through this protocol", i)
		}
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > uint64(quota.MaxAmount) {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].hits_addend %d is past 2^53-1", i, h.GetValue())
		}
	}
	return dom, nil
}

func (s *Service) domainNames() []string {
	names := make([]string, 0, len(s.cfg.Domains))
	for n := range s.cfg.Domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// hitsOf is a descriptor's hits: its own hits_addend when set (0 too),
// else the request's, else 1 (as envoyproxy/ratelimit counts them).
// validate has refused hits past 2^53−1.
func hitsOf(req *rls.RateLimitRequest, d *rlcommon.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), uint64(quota.MaxAmount)))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// plan maps the descriptors to resources and builds the charge.
func (s *Service) plan(ctx context.Context, dom *Domain, req *rls.RateLimitRequest, key *clientKey) ([]slot, quota.ChargeRequest, error) {
	slots := make([]slot, len(req.GetDescriptors()))
	creq := quota.ChargeRequest{ClientID: key.client()}
	for i, d := range req.GetDescriptors() {
		entries := make([]Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		sl := slot{node: dom.match(entries), hits: hitsOf(req, d), item: -1}
		if sl.node == nil {
			slots[i] = sl
			continue
		}
		name, err := sl.node.resourceName(entries)
		if err == nil && sl.node.perValue {
			err = s.creator.ensure(ctx, sl.node, name)
		}
		var bad *badValueError
		switch {
		case errors.Is(err, errRejected):
			sl.rejected = true
			s.log.Info("gateway descriptor rejected: value outside the mapping's values or past its max_resources",
				zap.String("domain", dom.Name), zap.Int("line", sl.node.Line), zap.String("resource", name))
		case errors.As(err, &bad):
			return nil, creq, status.Errorf(codes.InvalidArgument, "descriptors[%d]: %v (mapping at line %d)", i, err, sl.node.Line)
		case err != nil:
			return nil, creq, s.mappingError(i, sl.node, name, err)
		}
		if !sl.rejected {
			if err := key.authorize(name); err != nil {
				return nil, creq, err
			}
			sl.resource, sl.item = name, len(creq.Items)
			creq.Items = append(creq.Items, quota.ChargeItem{
				ResourceName: name, Amount: sl.hits, Force: sl.node.Shadow || (sl.node.Usage && sl.hits > 0),
			})
		}
		slots[i] = sl
	}
	return slots, creq, nil
}

// mappingError answers a mapped resource that could not be used.
func (s *Service) mappingError(i int, d *Descriptor, name string, err error) error {
	if quota.CodeOf(err) == quota.CodeResourceNotFound {
		return status.Errorf(codes.NotFound, "descriptors[%d] maps to resource %q (gateway config line %d), which has no policy: create it with PUT /admin/policies/%s", i, name, d.Line, name)
	}
	c := grpcCode(err)
	if c == codes.Unavailable || c == codes.Internal {
		// The message of a backend failure carries addresses and driver
		// text: the log has it, the caller gets what to do.
		s.log.Warn("gateway mapping could not be resolved", zap.String("resource", name), zap.Int("line", d.Line), zap.Error(err))
		return status.Errorf(c, "descriptors[%d] (resource %q): the quota backends could not be read; retry", i, name)
	}
	return status.Errorf(c, "descriptors[%d] (resource %q): %v", i, name, err)
}

// failure answers a Charge that failed: bad input and missing policies
// as errors, a store failure as the closed answer (failMode OPEN policies
// only get here when some other policy of the request is CLOSED).
func (s *Service) failure(dom *Domain, slots []slot, err error) (*rls.RateLimitResponse, string, error) {
	switch c := grpcCode(err); c {
	case codes.Unavailable:
	case codes.Internal:
		s.log.Error("gateway charge failed", zap.String("domain", dom.Name), zap.Error(err))
		return nil, "", status.Error(codes.Internal, "internal error")
	default:
		return nil, "", status.Error(c, err.Error())
	}
	s.log.Warn("gateway request refused: the stores could not decide and a policy involved is failMode CLOSED",
		zap.String("domain", dom.Name), zap.String("answer", s.cfg.FailClosedAnswer), zap.Error(err))
	if s.cfg.FailClosedAnswer != "over_limit" {
		return nil, "", status.Error(codes.Unavailable, "the quota backends cannot decide and a policy of this request is failMode CLOSED; retry")
	}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OVER_LIMIT}
	for _, sl := range slots {
		code := rls.RateLimitResponse_OK
		if sl.item >= 0 {
			code = rls.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, &rls.RateLimitResponse_DescriptorStatus{Code: code})
	}
	return resp, resultOverLimit, nil
}

// answer builds the response from the charge's results.
func (s *Service) answer(dom *Domain, slots []slot, creq quota.ChargeRequest, cres quota.ChargeResponse, rejected bool) (*rls.RateLimitResponse, string, error) {
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, len(slots))}
	var closest *rls.RateLimitResponse_DescriptorStatus
	now := s.now()
	for i, sl := range slots {
		st, result := s.descriptorStatus(sl, cres, now)
		if st.Code == rls.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rls.RateLimitResponse_OVER_LIMIT
		}
		if st.CurrentLimit != nil && (closest == nil || st.LimitRemaining < closest.LimitRemaining ||
			st.Code == rls.RateLimitResponse_OVER_LIMIT && closest.Code != rls.RateLimitResponse_OVER_LIMIT) {
			closest = st
		}
		if result == resultShadow || result == resultOverage {
			s.log.Info("gateway descriptor past its limit", zap.String("domain", dom.Name), zap.String("resource", sl.resource),
				zap.String("result", result), zap.Int64("hits", sl.hits), zap.Int("line", sl.node.Line))
		}
		s.m.descriptors.WithLabelValues(dom.Name, resourceLabel(sl.node), result).Inc()
		if sl.item >= 0 && !cres.Refused && !rejected && sl.hits > 0 {
			s.m.hits.WithLabelValues(dom.Name, resourceLabel(sl.node)).Add(float64(sl.hits))
		}
		resp.Statuses[i] = st
	}
	if s.cfg.Headers.Enabled && closest != nil {
		resp.ResponseHeadersToAdd = s.headers(closest)
	}
	result := resultOK
	switch {
	case resp.OverallCode == rls.RateLimitResponse_OVER_LIMIT:
		result = resultOverLimit
	case cres.FailOpen:
		result = resultFailOpen
	}
	return resp, result, nil
}

// descriptorStatus is one descriptor's status and metric result.
func (s *Service) descriptorStatus(sl slot, cres quota.ChargeResponse, now time.Time) (*rls.RateLimitResponse_DescriptorStatus, string) {
	switch {
	case sl.node == nil:
		return &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, resultUnmatched
	case sl.rejected && sl.node.Shadow:
		return &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}, resultShadow
	case sl.rejected:
		return &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OVER_LIMIT}, resultRejected
	case len(cres.Items) == 0:
		// Not charged: another descriptor was rejected.
		return &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}, resultOK
	}
	it := cres.Items[sl.item]
	st := &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	if it.Checked {
		st.CurrentLimit = &rls.RateLimitResponse_RateLimit{Name: it.ResourceName, RequestsPerUnit: clamp32(it.Limit), Unit: unitOf(it.PeriodLength)}
		st.LimitRemaining = clamp32(it.Remaining)
		if !it.Period.End.IsZero() {
			st.DurationUntilReset = durationpb.New(max(0, it.Period.End.Sub(now)).Truncate(time.Second))
		}
	}
	result := resultOK
	switch {
	case cres.FailOpen:
		result = resultFailOpen
	case it.Exceeded && sl.node.Shadow:
		result = resultShadow
	case it.Exceeded && sl.node.Usage && sl.hits > 0:
		result = resultOverage
	case it.Exceeded:
		st.Code, result = rls.RateLimitResponse_OVER_LIMIT, resultOverLimit
	}
	return st, result
}

// headers are envoyproxy/ratelimit's response headers, from the status
// closest to its limit (an OVER_LIMIT one first).
func (s *Service) headers(st *rls.RateLimitResponse_DescriptorStatus) []*core.HeaderValue {
	reset := int64(0)
	if st.DurationUntilReset != nil {
		reset = st.DurationUntilReset.GetSeconds()
	}
	return []*core.HeaderValue{
		{Key: s.cfg.Headers.Limit, Value: fmt.Sprint(st.CurrentLimit.GetRequestsPerUnit())},
		{Key: s.cfg.Headers.Remaining, Value: fmt.Sprint(st.LimitRemaining)},
		{Key: s.cfg.Headers.Reset, Value: fmt.Sprint(reset)},
	}
}

// clamp32 fits an amount into the protocol's uint32 fields.
func clamp32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// unitOf names a period length when it is one of the protocol's units (a
// day varies by an hour at DST, a month or a year by days); else UNKNOWN
// (also 0: a policy that never resets).
func unitOf(d time.Duration) rls.RateLimitResponse_RateLimit_Unit {
	switch {
	case d == time.Second:
		return rls.RateLimitResponse_RateLimit_SECOND
	case d == time.Minute:
		return rls.RateLimitResponse_RateLimit_MINUTE
	case d == time.Hour:
		return rls.RateLimitResponse_RateLimit_HOUR
	case d >= 23*time.Hour && d <= 25*time.Hour:
		return rls.RateLimitResponse_RateLimit_DAY
	case d >= 7*24*time.Hour-time.Hour && d <= 7*24*time.Hour+time.Hour:
		return rls.RateLimitResponse_RateLimit_WEEK
	case d >= 28*24*time.Hour && d <= 31*24*time.Hour+time.Hour:
		return rls.RateLimitResponse_RateLimit_MONTH
	case d >= 365*24*time.Hour && d <= 366*24*time.Hour+time.Hour:
		return rls.RateLimitResponse_RateLimit_YEAR
	}
	return rls.RateLimitResponse_RateLimit_UNKNOWN
}
