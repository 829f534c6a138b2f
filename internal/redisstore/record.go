package redisstore

import "strings"

// recordField is the hash field of a packed session's record, and
// recordFields its fields in order (scripts/session_record.lib): apply.lua's
// fast path writes a new session on a plain resource as status, client,
// att, bep, lease and r = "amount|min|granted|remaining|start|period" (the
// numbers no script changes after the apply; decimal, so no value holds
// '|'). A field the hash has of its own wins over the record's copy (seed.lua
// may write the full form's fields onto a session it restores).
const recordField = "r"

var recordFields = [...]string{"amount", "min", "granted", "remaining", "start", "period"}

// splitRecord splits a packed record into its six values; ok is false when
// r does not hold six (not a record: then nothing is taken from it).
func splitRecord(r string) (vals [len(recordFields)]string, ok bool) {
	for i := 0; i < len(recordFields)-1; i++ {
		v, rest, found := strings.Cut(r, "|")
		if !found {
			return vals, false
		}
		vals[i], r = v, rest
	}
	if strings.Contains(r, "|") {
		return vals, false
	}
	vals[len(recordFields)-1] = r
	return vals, true
}

// fromRecord fills in the values of an HMGET of fields whose last field is
// recordField: each value the hash does not have (nil) of a field the
// record holds is taken from the record, when there is one. vals is
// changed in place; its last value (the record) is left as read.
func fromRecord(fields []string, vals []any) {
	n := len(fields) - 1
	if n < 0 || len(vals) != len(fields) || fields[n] != recordField {
		return
	}
	r, _ := vals[n].(string)
	rec, ok := splitRecord(r)
	if !ok {
		return
	}
	for i, f := range fields[:n] {
		if vals[i] != nil {
			continue
		}
		for j, rf := range recordFields {
			if rf == f {
				vals[i] = rec[j]
				break
			}
		}
	}
}

// unpackSession is a session hash (HGETALL) in its full form: a packed
// record's fields added where the hash has none of its own, the record
// itself removed. Readers that look at the whole hash (tests, diagnostics)
// see one form whichever one apply.lua wrote.
func unpackSession(h map[string]string) map[string]string {
	r, ok := h[recordField]
	if !ok {
		return h
	}
	rec, ok := splitRecord(r)
	if !ok {
		return h
	}
	out := make(map[string]string, len(h)+len(recordFields))
	for k, v := range h {
		if k != recordField {
			out[k] = v
		}
	}
	for j, f := range recordFields {
		if _, own := out[f]; !own {
			out[f] = rec[j]
		}
	}
	return out
}
