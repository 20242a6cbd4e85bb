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
