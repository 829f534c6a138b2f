// Package policysync tells every instance of a deployment, at once, that a
// resource's policy changed (a PUT or PATCH, a period reset, a delete, its
// business lines, pools settings or temporary grants), so that each drops
// what it cached of that resource and reads it again on its next request.
//
// It uses Redis pub/sub on one channel (Channel) on the Redis the instances
// share: a change costs one PUBLISH, and the apply path costs nothing (no
// extra command, no version read per request). Pub/sub delivers at most
// once: a message sent while an instance's subscription is down (a Redis
// restart, a network cut) is lost to it, and that instance keeps the old
// policy until its cache TTL (QC_POLICY_CACHE_TTL, 2 s by default) expires,
// as it did before this package. So the TTL stays the bound; the bus makes
// the usual case prompt.
package policysync
