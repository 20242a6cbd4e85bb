package p2p

// SetIgnoreCTS makes senders ignore the split rendezvous's CTS frames (a
// sender that stopped after its RTS), for TestSplitRendezvousSenderGone.
func SetIgnoreCTS(on bool) { testIgnoreCTS.Store(on) }
