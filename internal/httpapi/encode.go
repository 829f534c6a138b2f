package httpapi

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// jsonAppender is an answer that writes its own JSON: exactly the bytes
// encoding/json.Marshal gives for it (TestAppendersMatchEncodingJSON), with
// no reflection and one buffer. writeJSON uses it for the hot-path answers
// (apply, heartbeat, finish); every other answer goes through json.Marshal.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// appendString appends s as encoding/json encodes a string. A string of
// printable ASCII without '"', '\\', '<', '>' and '&' (session ids, codes,
// timestamps, policy versions) is copied as it is; any other is left to
// encoding/json (its escapes of HTML characters, control characters,
// U+2028/U+2029 and invalid UTF-8).
func appendString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendField appends ,"name": (name is a literal without escapes); first
// leaves the comma out.
func appendField(b []byte, name string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendInt(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendField(b, name, false), v, 10)
}

func appendBool(b []byte, name string, v bool) []byte {
	return strconv.AppendBool(appendField(b, name, false), v)
}

func appendStr(b []byte, name, v string) []byte {
	return appendString(appendField(b, name, false), v)
}

// appendOmitEmpty is appendStr for a field tagged omitempty: nothing for "".
func appendOmitEmpty(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendStr(b, name, v)
}

// appendHead appends {"success":…,"code":…,"sessionId":…, the start every
// hot-path answer shares.
func appendHead(b []byte, success bool, code, sessionID string) []byte {
	b = strconv.AppendBool(appendField(append(b, '{'), "success", true), success)
	b = appendStr(b, "code", code)
	return appendStr(b, "sessionId", sessionID)
}

func (r applyResponse) appendJSON(b []byte) []byte {
	b = appendHead(b, r.Success, r.Code, r.SessionID)
	b = appendInt(b, "grantedAmount", r.GrantedAmount)
	b = appendInt(b, "remainingQuota", r.RemainingQuota)
	if r.LineRemaining != nil {
		b = appendInt(b, "lineRemaining", *r.LineRemaining)
	}
	b = appendStr(b, "leaseExpiresAt", r.LeaseExpiresAt)
	b = appendInt(b, "heartbeatIntervalSeconds", r.HeartbeatIntervalSeconds)
	if r.FailOpen {
		b = appendBool(b, "failOpen", true)
	}
	if r.Drawn != nil {
		d := r.Drawn
		b = appendField(b, "drawn", false)
		b = strconv.AppendInt(appendField(append(b, '{'), "dedicated", true), d.Dedicated, 10)
		b = appendInt(b, "shared", d.Shared)
		b = appendInt(b, "buffer", d.Buffer)
		b = append(appendInt(b, "grant", d.Grant), '}')
	}
	if r.QuotaTight {
		b = appendBool(b, "quotaTight", true)
	}
	return append(appendOmitEmpty(b, "policyVersion", r.PolicyVersion), '}')
}

func (r heartbeatResponse) appendJSON(b []byte) []byte {
	b = appendHead(b, r.Success, r.Code, r.SessionID)
	b = appendStr(appendStr(b, "status", r.Status), "leaseExpiresAt", r.LeaseExpiresAt)
	return append(appendOmitEmpty(b, "policyVersion", r.PolicyVersion), '}')
}

func (r finishResponse) appendJSON(b []byte) []byte {
	b = appendHead(b, r.Success, r.Code, r.SessionID)
	b = appendInt(b, "grantedAmount", r.GrantedAmount)
	b = appendInt(b, "chargedAmount", r.ChargedAmount)
	b = appendInt(b, "refundedAmount", r.RefundedAmount)
	b = appendInt(b, "overageAmount", r.OverageAmount)
	b = appendInt(b, "remainingQuota", r.RemainingQuota)
	return append(b, '}')
}
