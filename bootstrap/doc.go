// Package bootstrap is rdmago's out-of-band rendezvous: how the ranks of a
// job find each other and exchange queue-pair addresses before any RDMA
// traffic flows. It is a small authenticated key-value store (put, get,
// add) with fence and allgather, behind the narrow Store interface, so that
// a launcher's own key-value service (PMI) can stand in for it.
//
//	// The launcher (or rank 0, see Join) runs the server:
//	token, _ := bootstrap.NewToken()
//	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 4})
//	if err != nil { ... }
//	defer srv.Close()
//
//	// Each rank joins; Dial returns once all four have joined and agree on
//	// version and transport configuration.
//	c, err := bootstrap.Dial(ctx, bootstrap.ClientOptions{
//		Addr: srv.Addr(), Token: token, Rank: rank, Size: 4,
//		Version: "v0.1.0", Config: "tcp"})
//	if err != nil { ... } // "bootstrap: join: after 30s, ranks 3 and 7 of 8 have not joined (...)"
//	defer c.Close()
//	addrs, err := bootstrap.Allgather(ctx, c, "qp", myQPAddress)
//
// # Implementations
//
// Client (over TCP, to a Server), and NewMemory for tests: every rank in one
// process. Both implement Store and the optional Adder, Allgatherer and
// Aborter. A launcher holds the Server: Ready tells it the job has
// started, Missing who has not joined, Aborts which rank ended the job.
// Without a launcher, Join lets rank 0 serve at an agreed address.
//
// The address a rank advertises to its peers for its transports' listening
// sockets comes from Client.AdvertiseAddr: interfaces selected by name,
// exclusion or CIDR ("eth0,ib0", "^docker0,lo", "10.0.0.0/8", the syntax of
// internal/netsel that the transports share), never loopback when the job
// spans hosts (Client.SpansHosts), preferring the route to the server.
//
// # Security
//
// Every connection runs a mutual challenge-response before anything else:
// HMAC-SHA256 of both sides' fresh nonces under the job token, so the token
// never crosses the wire and neither side can be fooled by a replay. A
// connection that fails it, sends garbage or an oversized frame, or stays
// silent past the handshake timeout is logged and closed without touching
// the job. The token keeps strangers out; it does not encrypt: the values
// (addresses) are not secret, and an attacker who can rewrite TCP streams
// on the path is outside this model.
//
// # Failures
//
// Nothing waits forever: every blocking call takes a context, and when it
// ends the error says who is missing ("after 5s, ranks 3 and 7 of 8 have
// not arrived"). A rank that leaves or dies makes every collective it has
// not entered fail on the other ranks with ErrRankLeft naming it. Abort
// ends the job for every rank and reaches the launcher through
// Server.Aborts.
//
// The wire format is in docs/wire-bootstrap.md.
package bootstrap
