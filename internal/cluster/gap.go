package cluster

// inboxGap computes the gap that ReadInbox reports, shared by every backend
// so that they agree to the message.
//
// Every way a message leaves an inbox (acknowledgement, the limit, expiry)
// removes the oldest ones first, so what is kept is always the contiguous
// run firstKept..last (firstKept = 0 when nothing is kept). The reader has
// seen everything up to since, and everything up to acked was confirmed by
// someone, so the messages that are gone and were owed to the reader are
// max(since, acked)+1 .. firstKept-1, or .. last when nothing is kept.
// It returns (0, 0) when there is no gap.
func inboxGap(since, acked, firstKept, last int64) (from, to int64) {
	from = max(since, acked) + 1
	to = last
	if firstKept > 0 {
		to = firstKept - 1
	}
	if from < 1 || to < from {
		return 0, 0
	}
	return from, to
}
