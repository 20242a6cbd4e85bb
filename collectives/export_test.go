package collectives

// BcastSplits reports whether a two-rank shared-memory bcast of n bytes
// splits the copy under the default model.
func BcastSplits(n int) bool { return defModel.bcastSplits(n) }
