package softrc

import "github.com/rdmago/rdmago/verbs"

// OwedKicks is how many kicks q's posts owe its link and have not made
// (held by HoldPosts, or about to be made).
func OwedKicks(q verbs.QP) int {
	qq := q.(*QP)
	qq.mu.Lock()
	defer qq.mu.Unlock()
	return qq.kicks
}

// PostLentPair queues the lent pair (wr, tail) as PostSendLentPair's link
// callback does, without a link that writes it.
func (q *QP) PostLentPair(wr verbs.SendWR, tail []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, err := q.postPairLocked(wr, tail)
	return err
}

// ForgetLentTails marks every queued request with a tail as one whose
// lent tail was written and taken back (PostSendLentPair's gone), as if
// it had to be sent again after an RNR.
func (q *QP) ForgetLentTails() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := q.next; i < q.tail; i++ {
		e := &q.sq[i%uint64(len(q.sq))]
		if e.tail != nil {
			e.tail, e.gone = nil, true
		}
	}
}
