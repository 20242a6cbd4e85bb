package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/ibv"
)

// config mirrors ibv_rc_pingpong's options.
type config struct {
	Device   string // -d; empty: first device with an active port
	IBPort   int    // -i
	GIDIndex int    // -g; -1: auto-detect (RoCE v2)
	TCPPort  int    // -p
	Size     int    // -s
	Iters    int    // -n
	RxDepth  int    // -r
	MTU      int    // -m, bytes
	Events   bool   // -e: sleep on the CQ instead of busy polling
	Check    bool   // -c: rc_pingpong's --chk marks (see fill)
	Server   string // servername; empty: be the server
	Bind     string // server: address to listen on (empty: all)
	Timeout  time.Duration
}

func defaultConfig() config {
	return config{GIDIndex: -1, TCPPort: 18515, Size: 4096, Iters: 1000, RxDepth: 500, MTU: 1024, IBPort: 1,
		Timeout: 2 * time.Minute}
}

// pattern is the byte ibv_rc_pingpong fills its buffer with.
const pattern = 0x7b

// fill makes buf a message as ibv_rc_pingpong sends it: every byte 0x7b,
// and with -c (its --chk) the first byte of every page 0. Its client
// writes those marks before the first SEND, its server (which sends back
// the buffer it receives into) checks them after the last receive, so
// they must travel in every message of a -c run.
func fill(buf []byte, check bool, pageSize int) {
	for i := range buf {
		buf[i] = pattern
	}
	if check {
		for i := 0; i < len(buf); i += pageSize {
			buf[i] = 0
		}
	}
}

// verify checks that buf is the message fill makes, naming the first byte
// that is not (and its page, in rc_pingpong's words, with -c).
func verify(buf []byte, check bool, pageSize int) error {
	for i, b := range buf {
		want := byte(pattern)
		if check && i%pageSize == 0 {
			want = 0
		}
		if b == want {
			continue
		}
		if check {
			hint := ""
			if i%pageSize == 0 {
				hint = " (does the peer run with -c too?)"
			}
			return fmt.Errorf("invalid data in page %d: byte %d is %#x, want %#x%s", i/pageSize, i, b, want, hint)
		}
		return fmt.Errorf("byte %d is %#x, want %#x", i, b, want)
	}
	return nil
}

const (
	recvWRID = 1
	sendWRID = 2
)

type result struct {
	Local, Remote peerInfo
	Bytes         int64
	Elapsed       time.Duration
}

func (r result) report(w io.Writer, iters int) {
	usec := float64(r.Elapsed.Microseconds())
	if usec == 0 {
		usec = 1
	}
	fmt.Fprintf(w, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", r.Bytes, usec/1e6, float64(r.Bytes)*8/usec)
	fmt.Fprintf(w, "%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec/1e6, usec/float64(iters))
}

func mtuCode(n int) (verbs.MTU, error) {
	for c := verbs.MTU256; c <= verbs.MTU4096; c++ {
		if c.Bytes() == n {
			return c, nil
		}
	}
	return 0, fmt.Errorf("invalid MTU %d (want 256, 512, 1024, 2048 or 4096)", n)
}

// run is one ibv_rc_pingpong session, as client (cfg.Server set) or server.
func run(ctx context.Context, cfg config, out, status io.Writer) (result, error) {
	var res result
	mtu, err := mtuCode(cfg.MTU)
	if err != nil {
		return res, err
	}
	if cfg.Size < 1 || cfg.Iters < 1 || cfg.RxDepth < 2 {
		return res, fmt.Errorf("size %d, iters %d, rx depth %d: want size >= 1, iters >= 1, rx depth >= 2", cfg.Size, cfg.Iters, cfg.RxDepth)
	}
	opts := ibv.Options{Port: cfg.IBPort}
	if cfg.GIDIndex >= 0 {
		opts.GID = ibv.GIDIndex(cfg.GIDIndex)
	}
	dev, err := ibv.Open(ctx, verbs.DeviceOptions{Name: cfg.Device}, opts)
	if err != nil {
		return res, err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return res, err
	}
	cq, err := dev.CreateCQ(cfg.RxDepth + 1)
	if err != nil {
		return res, err
	}
	// Separate send and receive buffers (rc_pingpong uses one): the
	// receive buffer is cleared before each message may arrive, so a
	// received pattern proves the peer's data landed. Both carry what
	// rc_pingpong's one buffer holds in the run (see fill).
	sbuf, err := pd.AllocMR(cfg.Size, verbs.AccessLocalWrite)
	if err != nil {
		return res, err
	}
	rbuf, err := pd.AllocMR(cfg.Size, verbs.AccessLocalWrite)
	if err != nil {
		return res, err
	}
	pageSize := os.Getpagesize()
	fill(sbuf.Bytes(), cfg.Check, pageSize)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return res, err
	}
	// INIT as rc_pingpong: pkey 0, port, no remote access (SEND/RECV only).
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: uint8(cfg.IBPort)},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return res, err
	}
	recv := verbs.RecvWR{ID: recvWRID, SGL: []verbs.SGE{verbs.SGEOf(rbuf, 0, cfg.Size)}}
	recvs := make([]verbs.RecvWR, cfg.RxDepth)
	for i := range recvs {
		recvs[i] = recv
	}
	if err := qp.PostRecv(recvs...); err != nil {
		return res, err
	}
	routs := cfg.RxDepth

	me, err := ibv.DecodeAddress(qp.Address())
	if err != nil {
		return res, err
	}
	res.Local = peerInfo{LID: me.LID, QPN: me.QPN, PSN: me.PSN, GID: me.GID}
	fmt.Fprintf(out, "  local address:  %v\n", res.Local)

	connect := func(p peerInfo) error {
		remote, err := ibv.EncodeAddress(ibv.Endpoint{QPN: p.QPN, PSN: p.PSN, LID: p.LID, GID: p.GID})
		if err != nil {
			return err
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPRTR, Remote: remote, PathMTU: mtu, MaxDestRdAtomic: 1, MinRNRTimer: 12},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %w", err)
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPRTS, SQPSN: me.PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxQPRdAtomic: 1},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %w", err)
		}
		return nil
	}
	if cfg.Server != "" {
		res.Remote, err = clientExchange(ctx, cfg, res.Local)
		if err == nil {
			err = connect(res.Remote)
		}
	} else {
		res.Remote, err = serverExchange(ctx, cfg, res.Local, connect, status)
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "  remote address: %v\n", res.Remote)

	// The ping-pong: the client sends first; each side posts its next SEND
	// once both its previous SEND and a RECV have completed.
	send := verbs.SendWR{ID: sendWRID, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(sbuf, 0, cfg.Size)}}
	start := time.Now()
	pending := recvWRID
	if cfg.Server != "" {
		if err := qp.PostSend(send); err != nil {
			return res, fmt.Errorf("couldn't post send: %w", err)
		}
		pending |= sendWRID
	}
	rcnt, scnt := 0, 0
	wcs := make([]verbs.WC, 2)
	for rcnt < cfg.Iters || scnt < cfg.Iters {
		var n int
		for n == 0 {
			if cfg.Events {
				if err := cq.Wait(ctx); err != nil {
					return res, fmt.Errorf("after %d sends and %d receives: %w", scnt, rcnt, err)
				}
			} else if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("after %d sends and %d receives: %w", scnt, rcnt, err)
			}
			n = cq.Poll(wcs)
		}
		for _, wc := range wcs[:n] {
			if err := wc.Err(); err != nil {
				return res, fmt.Errorf("failed status %v for wr_id %d: %w", wc.Status, wc.ID, err)
			}
			switch wc.ID {
			case sendWRID:
				scnt++
			case recvWRID:
				if wc.ByteLen != uint32(cfg.Size) {
					return res, fmt.Errorf("receive %d: %d bytes, want %d", rcnt, wc.ByteLen, cfg.Size)
				}
				if err := verify(rbuf.Bytes(), cfg.Check, pageSize); err != nil {
					return res, fmt.Errorf("receive %d: %w", rcnt, err)
				}
				clear(rbuf.Bytes())
				if routs--; routs <= 1 {
					more := recvs[:cfg.RxDepth-routs]
					if err := qp.PostRecv(more...); err != nil {
						return res, fmt.Errorf("couldn't post receive: %w", err)
					}
					routs += len(more)
				}
				rcnt++
			default:
				return res, fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			pending &^= int(wc.ID)
			if scnt < cfg.Iters && pending == 0 {
				if err := qp.PostSend(send); err != nil {
					return res, fmt.Errorf("couldn't post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Bytes = int64(cfg.Size) * int64(cfg.Iters) * 2
	res.report(out, cfg.Iters)
	return res, nil
}

// clientExchange: connect, write our 52 bytes, read the server's, write
// "done" and close (rc_pingpong's pp_client_exch_dest).
func clientExchange(ctx context.Context, cfg config, me peerInfo) (peerInfo, error) {
	addr := net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.TCPPort))
	var conn net.Conn
	var err error
	// The server may not be listening yet: retry until ctx ends.
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		var d net.Dialer
		if conn, err = d.DialContext(ctx, "tcp", addr); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return peerInfo{}, fmt.Errorf("couldn't connect to %s: %w", addr, err)
		case <-time.After(delay):
		}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg, err := encodeMsg(me)
	if err != nil {
		return peerInfo{}, err
	}
	if _, err := conn.Write(msg); err != nil {
		return peerInfo{}, fmt.Errorf("couldn't send local address to %s: %w", addr, err)
	}
	buf := make([]byte, msgLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return peerInfo{}, fmt.Errorf("couldn't read remote address from %s: %w", addr, err)
	}
	p, err := decodeMsg(buf)
	if err != nil {
		return peerInfo{}, fmt.Errorf("from %s: %w", addr, err)
	}
	if _, err := conn.Write(done); err != nil {
		return peerInfo{}, fmt.Errorf("couldn't send \"done\" to %s: %w", addr, err)
	}
	return p, nil
}

// serverExchange: accept one client, read its 52 bytes, move our QP to
// RTR and RTS, answer with ours, and wait for "done" (pp_server_exch_dest).
func serverExchange(ctx context.Context, cfg config, me peerInfo, connect func(peerInfo) error, listening io.Writer) (peerInfo, error) {
	var lc net.ListenConfig
	addr := net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.TCPPort))
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return peerInfo{}, fmt.Errorf("couldn't listen on %s: %w", addr, err)
	}
	// rc_pingpong says nothing here; we say where we listen (on stderr in
	// the command) so that scripts can start the client without guessing.
	fmt.Fprintf(listening, "waiting for a connection on %v\n", ln.Addr())
	stopLn := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stopLn()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return peerInfo{}, fmt.Errorf("accept on %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	from := conn.RemoteAddr()
	buf := make([]byte, msgLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return peerInfo{}, fmt.Errorf("couldn't read remote address from %v: %w", from, err)
	}
	p, err := decodeMsg(buf)
	if err != nil {
		return peerInfo{}, fmt.Errorf("from %v: %w", from, err)
	}
	if err := connect(p); err != nil {
		return peerInfo{}, err
	}
	msg, err := encodeMsg(me)
	if err != nil {
		return peerInfo{}, err
	}
	if _, err := conn.Write(msg); err != nil {
		return peerInfo{}, fmt.Errorf("couldn't send local address to %v: %w", from, err)
	}
	// "done" may arrive short or the client may close at once; either way
	// it has our address.
	if _, err := conn.Read(buf[:len(done)]); err != nil && !errors.Is(err, io.EOF) {
		return peerInfo{}, fmt.Errorf("waiting for \"done\" from %v: %w", from, err)
	}
	return p, nil
}
