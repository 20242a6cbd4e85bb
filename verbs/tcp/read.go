package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/futex"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// The read side of a link. Frames are read and handled by whoever holds the
// link's read token (tok): its reader goroutine, or a goroutine waiting on
// one of the QP's CQs (a poller, see softrc.Driver). A poller that finds its
// completion missing reads the socket itself, so the frame that completes
// it wakes it straight from the network poller, as a raw TCP read would,
// instead of waking the reader goroutine, which would then have to wake
// the poller: each such hand-off costs a futex wake-up and a trip through
// the scheduler, more than the frame's own work on a busy machine.
//
// The reader goroutine gives the token to a poller on request: the poller
// raises want and interrupts the reader's blocked read with a read deadline
// in the past; the reader notices at the next frame boundary (a frame is
// never left half read) and hands the token over. A poller itself blocks
// only where its ctx may interrupt it (see pollFrame). A poller that is done
// puts the token back but does not wake the reader goroutine: a waiter in a
// loop comes back within microseconds, and waking the reader each time would
// cost the hand-off this scheme saves. The reader resumes when no poller has
// taken the token for Options.PollGrace, or at once when a waiter parks
// because another goroutine drives the link (it must not depend on that
// driver's loop), or when the poller leaves bytes buffered. So traffic that
// nobody polls for is served at most PollGrace late.

const (
	holderNone = iota
	holderReader
	holderPoller
)

// aLongTimeAgo is a read deadline that interrupts a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// errInterrupted is returned by an interruptible read (sockReader.intr)
// that a past deadline interrupted: what it had read stays buffered, and
// nothing of the next frame has been handled.
var errInterrupted = errors.New("tcp: read interrupted")

// ackHoldMax is how many ACKs a poller holds back while frames stream in
// (see pollFrame): far fewer than a sender's send queue holds, so a peer
// never runs out of it waiting for them.
const ackHoldMax = 16

// errLarge tells a poller that the next frame is too large for it to wait
// for whole: the reader goroutine receives it (see pollFrame).
var errLarge = errors.New("tcp: frame larger than the read buffer")

// sockReader is the bufio.Reader's source: the connection, after the bytes
// the handshake's reader had buffered already (pre).
type sockReader struct {
	l       *link
	pre     []byte
	intr    bool // the read is interruptible: nothing of a frame is being handled
	noBlock bool // the read takes what is queued and never waits (errWouldBlock)
	drained bool // the last noBlock read took less than it had room for: all that was queued
	hdrOnly bool // read no more than a header: a large payload may follow (see readFrame)
	// spin makes a read poll the socket without sleeping while bytes keep
	// coming, until none came for spin (see spinRead); zero never spins.
	spin time.Duration
	// minRead makes a spinning read wait until that much is queued (or
	// all it wants), looking with SIOCINQ rather than poll: a streamed
	// SEND is read in pieces of that size, not in each segment's.
	minRead int
}

// headerRead is the most a header read alone (sockReader.hdrOnly) takes
// when nothing tells how much is queued: a few headers' worth, so that the
// ACKs sent ahead of a large frame come with its header in one system
// call, at the price of copying at most that much of its payload.
const headerRead = 4 * HeaderLen

// errWouldBlock is a sockReader.noBlock read's answer when nothing is queued.
var errWouldBlock = errors.New("tcp: nothing queued")

func (r *sockReader) Read(p []byte) (int, error) {
	// What the last look into the socket found queued holds only until
	// this read takes some of it.
	q := r.l.takeQueued()
	r.l.knownQueued = 0
	if r.hdrOnly && len(p) > HeaderLen {
		// What the last look into the socket found queued, if a few small
		// frames' worth (smallQueued), holds no large payload's bulk: a
		// large frame is written whole, so it arrives as a large queue.
		// Reading it all takes the ACKs and READ requests that come
		// together in one system call instead of one (and a look) each.
		lim := headerRead
		if q > headerRead && q <= smallQueued {
			lim = q
		}
		p = p[:min(len(p), lim)]
		if lim > headerRead {
			r.l.hdrBatches.Add(1)
		}
		n, err := r.read(p)
		if err == nil && q > n {
			// The rest of what the look found is still queued: a poller
			// that finds the frame's payload among it reads it at once,
			// without another look (pollFrame).
			r.l.knownQueued = q - n
		}
		return n, err
	}
	return r.read(p)
}

func (r *sockReader) read(p []byte) (int, error) {
	if len(r.pre) > 0 {
		n := copy(p, r.pre)
		r.pre = r.pre[n:]
		return n, nil
	}
	if r.noBlock {
		n, err := r.l.readQueued(p)
		r.drained = err == nil && n < len(p)
		return n, err
	}
	if r.spin > 0 {
		if n, err, done := r.spinRead(p); done {
			return n, err
		}
	}
	for {
		n, err := r.l.readWait(p)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		// A read deadline in the past is how a link interrupts a blocked
		// read (see above). Clear it; mid-frame, just go on reading.
		_ = r.l.c.SetReadDeadline(time.Time{})
		if n > 0 {
			return n, nil
		}
		if r.intr {
			return 0, errInterrupted
		}
	}
}

// spinRead is read for a waiter streaming a frame (streamFrame): it takes
// what the socket holds without sleeping, polling it until bytes come,
// the waiter must stop (errInterrupted: its CQ has a completion or its ctx
// ended) or none came for r.spin (done false: the caller blocks). A
// receiver asleep in the network poller makes every segment the sender
// hands the kernel wake it, an inter-processor interrupt on the sender's
// CPU, a VM exit on a VM: a 1 MiB frame written to a sleeping reader took
// its sender 440 µs to write, 70-200 µs to a polling one. It probes with
// poll(2), which does not lock the socket: probing by reads, which do,
// kept the kernel from handling the arriving segments at once and cost a
// stream of 1 MiB messages a tenth of its bandwidth. With minRead (a
// SEND's body) it probes with SIOCINQ, which locks the socket only to
// count, and reads once that much is there. It does not poll
// while a writer goroutine of the transport is writing: that may wait for
// the network poller, which runs only when this goroutine sleeps (with
// one CPU per rank, GOMAXPROCS is 1), and both ends of a bidirectional
// stream would then take turns instead of overlapping.
func (r *sockReader) spinRead(p []byte) (n int, err error, done bool) {
	var idle time.Time
	for i := 0; ; i++ {
		if r.l.t.writers.Load() > 0 {
			return 0, nil, false
		}
		var read bool
		if r.minRead > 0 {
			q, ok := r.l.socketQueued()
			read = !ok || q >= min(len(p), r.minRead)
		} else {
			read = i == 0 || r.l.pollReadable()
		}
		if read {
			n, err = r.l.readQueued(p)
			if err != errWouldBlock {
				r.l.spinStream.Add(int64(n))
				return n, err, true
			}
		}
		if r.l.fs.pl.stop() {
			return 0, errInterrupted, true
		}
		if r.l.t.opts.PollYield {
			futex.Yield()
		}
		if i&7 == 7 {
			now := time.Now()
			if idle.IsZero() {
				idle = now.Add(r.spin)
			} else if now.After(idle) {
				r.l.spinGaveUp.Add(1)
				return 0, nil, false
			}
			runtime.Gosched() // as in spinUntilQueued
		}
	}
}

// frameState is the reading side's scratch, owned by the token's holder.
type frameState struct {
	hb     [HeaderLen]byte
	pl     payload
	resp   softrc.Response
	maxMsg uint64
	// next is the header of the next frame, still in the read buffer, once
	// nextFrameLen has decoded it (nextOK): a stream of small frames is
	// decoded once a frame rather than at every look and again when read.
	next   softrc.Header
	nextOK bool
}

// payload reads one frame's body from the connection, never past its end.
type payload struct {
	br       *bufio.Reader
	sr       *sockReader // the connection itself, under br
	left     int
	progress func()
	copied   *uint64 // payload bytes copied out of the read buffer (for tests; see count)
	// A waiter streaming a READ response or SEND (streamFrame): its ctx and CQ.
	// While stopCQ is set, ReadFull's reads are interruptible, and one
	// that is interrupted, or finds ctx ended or the CQ with a completion,
	// suspends the frame (softrc.SuspendError) instead of blocking on.
	stopCtx  context.Context
	stopCQ   *softrc.CQ
	streamed *atomic.Int64 // payload bytes a streaming waiter read (for tests)
}

// stop reports whether a streaming waiter must return.
func (p *payload) stop() bool {
	return p.stopCQ != nil && (p.stopCQ.Pending() || p.stopCtx.Err() != nil)
}

// directMin is the least a payload read takes straight from the socket into
// its destination once the read buffer holds nothing more of the frame:
// below it, reading through the buffer, which also takes the frames that
// follow, saves the system calls; above it, the copy out of the buffer costs
// more than a system call.
const directMin = 16 << 10

// headerAloneDefault is Options.HeaderAloneMin's default: only frames
// larger than the read buffer. A 32 KiB threshold once measured 0.81x the
// time of a bound 64 KiB p2pbench ping-pong, but in rdmabench latency
// between two ranks (unbound, one host and across network namespaces) a
// header read alone, and the wait for its payload to be queued whole, cost
// 32 KiB messages twice their time: reading headers with what follows took
// 32 KiB to 0.51x / 0.54x / 0.60x the time and 64 KiB to 0.76x / 0.80x /
// 0.96x (osu-compare 7-9 rounds, one host / two cross-host runs, load
// average 2), with bw and bibw at 16-256 KiB unchanged (0.84-1.18,
// within their noise).
const headerAloneDefault = readBufSize

func (p *payload) ReadFull(dst []byte) error {
	if len(dst) > p.left {
		return fmt.Errorf("%w: read of %d bytes past the frame's %d remaining", softrc.ErrProtocol, len(dst), p.left)
	}
	if p.stopCQ == nil && len(dst) <= p.br.Buffered() && len(dst) <= softrc.ProgressChunk {
		// All of it is buffered and nobody streams (a small frame's
		// payload, a WRITE_RUN's writes): one copy, and no deferred calls
		// or locked instructions, which a run's small writes paid per write.
		n, _ := p.br.Read(dst) // n == len(dst): bufio copies from what it holds
		p.left -= n
		p.count(n)
		return nil
	}
	var copied int
	defer func() { p.count(copied) }()
	direct := false // the rest goes straight from the socket
	filled := 0     // bytes of dst placed so far
	if p.stopCQ != nil {
		p.sr.intr = true
		defer func() { p.sr.intr = false }()
	}
	for len(dst) > 0 {
		k := min(len(dst), softrc.ProgressChunk)
		for got := 0; got < k; {
			var n int
			var err error
			if !direct && p.br.Buffered() == 0 && len(dst)-got >= directMin {
				// Once direct, the tail stays so even when a read leaves
				// less than directMin of it: buffering it would copy it.
				direct = true
			}
			if direct {
				n, err = p.sr.Read(dst[got:k])
			} else {
				n, err = p.br.Read(dst[got:k])
				copied += n
			}
			got += n
			p.left -= n
			if p.stopCQ != nil && n > 0 && p.streamed != nil {
				p.streamed.Add(int64(n))
			}
			if p.stopCQ != nil && (err == errInterrupted || err == nil && got < len(dst) && p.stop()) {
				return &softrc.SuspendError{Filled: filled + got}
			}
			if err != nil {
				if err == io.EOF && got < k {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		filled += k
		dst = dst[k:]
		if p.progress != nil && len(dst) > 0 {
			p.progress()
		}
	}
	return nil
}

// count adds n to the bytes copied out of the read buffer (payload.copied):
// one writer at a time, the holder of the read token, so a light store.
func (p *payload) count(n int) {
	if n > 0 && p.copied != nil {
		shmsync.PublishLight64(p.copied, *p.copied+uint64(n))
	}
}

func (p *payload) Skip(n int) error {
	if n > p.left {
		return fmt.Errorf("%w: skip of %d bytes past the frame's %d remaining", softrc.ErrProtocol, n, p.left)
	}
	k, err := p.br.Discard(n)
	p.left -= k
	return err
}

// readFrame reads and handles one frame; the caller holds the token. With
// nothing buffered it first blocks for the frame's first byte, and returns
// errInterrupted, having consumed nothing, if that read is interrupted.
func (l *link) readFrame() error {
	if l.mid {
		return l.resumeFrame()
	}
	fs := &l.fs
	// Lately frames came larger than the read buffer: read the next header
	// alone, so that a large payload after it goes from the socket straight
	// into place (payload.ReadFull) rather than through the buffer. (For
	// smaller frames the extra system call costs more than the copy.)
	l.sr.hdrOnly = l.br.Buffered() < HeaderLen && l.hugeSeen > 0
	if l.br.Buffered() == 0 {
		if l.nresps.Load() > 0 {
			// About to block: send the ACKs held back (see respond).
			l.sendResps()
		}
		l.sr.intr = true
		_, err := l.br.Peek(1)
		l.sr.intr = false
		if err != nil {
			l.sr.hdrOnly = false
			return err
		}
	}
	_, err := io.ReadFull(l.br, fs.hb[:])
	l.sr.hdrOnly = false
	if err != nil {
		return err
	}
	var h softrc.Header
	if fs.nextOK {
		h, fs.nextOK = fs.next, false
	} else {
		h, err = DecodeHeader(fs.hb[:], fs.maxMsg)
	}
	if err == nil && h.QPN != l.q.Num() {
		err = fmt.Errorf("%w: frame for qp %#x on the connection of qp %#x", softrc.ErrProtocol, h.QPN, l.q.Num())
	}
	if err != nil {
		return err
	}
	// Bytes streaming in from the peer, in either direction, show it is
	// alive: long payloads restart the ACK timer every MiB.
	pl := &fs.pl
	pl.left = h.PayloadLen()
	data := pl.left > 0 // frames without data (ACKs, READ requests) do not count down
	remember(&l.hugeSeen, HeaderLen+pl.left > readBufSize, data)
	remember(&l.aloneSeen, pl.left >= l.t.opts.HeaderAloneMin, data)
	remember(&l.queuedSeen, pl.left >= queuedDirectMin, data)
	remember(&l.largeSeen, HeaderLen+pl.left > spinFillMax, data)
	if h.Op.IsRequest() {
		err = l.q.HandleRequest(&h, pl, &fs.resp)
		if err != softrc.ErrSuspended {
			l.answer(err, h.Op == softrc.FrameWrite && h.Len == 0)
		}
	} else {
		err = l.q.HandleResponse(&h, pl)
	}
	if err == softrc.ErrSuspended {
		// A streaming waiter must return mid-payload (a READ response or a
		// SEND): whoever reads next finishes the frame first (resumeFrame),
		// and a SEND's answer with it.
		l.mid, l.midSend = true, isSend(h.Op)
		l.suspends.Add(1)
		return errInterrupted
	}
	return l.endFrame(err)
}

// answer sends the answer a request's handling left in fs.resp (none when
// its Op is 0), or lets it go when the handling failed (err); urgent as
// for respond.
func (l *link) answer(err error, urgent bool) {
	r := &l.fs.resp
	if r.Op == 0 {
		return
	}
	if err == nil {
		l.respond(r, urgent)
	} else {
		r.Done()
	}
}

// endFrame finishes a frame whose handling returned err: the payload left
// unread is skipped, and held responses go once no whole frame is
// buffered.
func (l *link) endFrame(err error) error {
	pl := &l.fs.pl
	if err == nil && pl.left > 0 {
		err = pl.Skip(pl.left)
	}
	// Every reading loop handles the whole frames buffered before it stops
	// (Drive drains them), so a held response leaves with the last.
	if l.urgentHeld && (err != nil || !l.frameBuffered()) {
		l.sendUrgent()
	}
	return err
}

// resumeFrame goes on with a READ response or SEND a streaming waiter
// suspended (l.mid): its payload's rest comes next on the connection.
func (l *link) resumeFrame() error {
	fs := &l.fs
	err := l.q.Resume(&fs.pl, &fs.resp)
	if err == softrc.ErrSuspended {
		return errInterrupted // suspended again (streamFrame)
	}
	l.mid = false
	l.answer(err, false)
	return l.endFrame(err)
}

// streamFrame has a waiter handle a READ response or SEND larger than its
// read buffer itself, reading the payload straight into place as it
// arrives: the copy out of the receiver's socket overlaps the copy into the
// sender's, which waiting for the frame whole (awaitQueued) serializes, and
// unlike leaving it to the reader goroutine it costs no hand-offs (to the
// reader goroutine and back with the completion, and the token's return).
// Its reads are interruptible: when its ctx ends or its CQ gets a
// completion, the frame is suspended where it is (l.mid) and the next
// holder of the token finishes it, so a waiter still returns when its ctx
// ends whatever the peer does.
func (l *link) streamFrame(ctx context.Context, cq *softrc.CQ) error {
	l.beforeBlock()
	l.watch(ctx)
	l.pblocked.Store(true)
	defer l.pblocked.Store(false)
	if cq.Pending() || ctx.Err() != nil {
		return errInterrupted
	}
	pl := &l.fs.pl
	pl.stopCtx, pl.stopCQ = ctx, cq
	if streamSpins {
		l.sr.spin = l.t.opts.PollSpin
		if l.mid && l.midSend || !l.mid && l.nextIsSend() {
			l.sr.minRead = streamReadMin
		}
	}
	err := l.readFrame()
	l.sr.spin, l.sr.minRead = 0, 0
	pl.stopCtx, pl.stopCQ = nil, nil
	if !l.mid {
		l.streamed.Add(1)
	}
	return err
}

// restQueued reports whether the rest of the next frame, need bytes in
// all, is queued in the socket already (a look, kept in knownQueued for
// the read that takes it): streaming it then would only cost the system
// calls a waiter makes before it may block (beforeBlock). Two ranks that
// exchange 256 KiB SENDs find each other's mostly there once their own is
// written: streamed, allreduce took 1.07 of the time.
func (l *link) restQueued(need int) bool {
	if l.mid || need > pollFrameMax {
		return false
	}
	rest := need - l.br.Buffered()
	if l.knownQueued >= rest {
		return true
	}
	n, ok := l.socketQueued()
	if ok {
		l.knownQueued = n
	}
	return ok && n >= rest
}

// streamReadMin is the least a waiter streaming a SEND reads at a time
// (sockReader.minRead): 2 hosts of one rank, a window of 256 KiB SENDs,
// read as each segment came, took about 4 reads and 5 polls a message
// and ran at 0.72 of the rate of reading each once it was queued whole.
const streamReadMin = 64 << 10

// nextHeader returns the next frame's header: the one nextFrameLen
// decoded (fs.next), else decoded from the read buffer; false when it is
// not all buffered or does not decode.
func (l *link) nextHeader() (softrc.Header, bool) {
	fs := &l.fs
	if fs.nextOK {
		return fs.next, true
	}
	if l.br.Buffered() < HeaderLen {
		return softrc.Header{}, false
	}
	b, _ := l.br.Peek(HeaderLen)
	h, err := DecodeHeader(b, fs.maxMsg)
	return h, err == nil
}

// isSend reports whether op is a SEND's.
func isSend(op softrc.FrameOp) bool { return op == softrc.FrameSend || op == softrc.FrameSendImm }

// nextIsSend reports whether the next frame, its header buffered, is a SEND.
func (l *link) nextIsSend() bool {
	h, ok := l.nextHeader()
	return ok && isSend(h.Op)
}

// streamable reports whether the next frame is one a waiter may stream
// (streamFrame): a READ response or a SEND, or the rest of one suspended.
func (l *link) streamable() bool {
	if l.mid {
		return true
	}
	h, ok := l.nextHeader()
	return ok && (h.Op == softrc.FrameReadResp || isSend(h.Op))
}

// respond queues a response. A plain ACK is held back: it leaves with the
// next frame this side sends (PostSend takes queued responses along), or
// when the reading side is about to block on the socket, which costs no
// latency, or at the latest when the reader goroutine resumes after
// PollGrace. So a ping-pong's ACKs ride on its data frames, and a waiter
// gets its completion without first paying a write for the ACK. Any other
// response (READ data, an atomic's result, a NAK) carries what the
// requester waits for: it goes once no further whole frame is buffered
// (readFrame sends it then), so the answers to requests that arrived
// together leave in one write: a READ in pieces, or a window of them,
// costs one syscall instead of one per piece. A response larger than
// holdMax goes at once: its copy dwarfs a syscall, so holding it back
// only delays it. It goes with the
// held-back ACKs before it, written here if the link is idle (never
// blocking: a full socket leaves it to the writer goroutine, so the
// reading side keeps draining the socket and two ends writing large
// messages to each other cannot deadlock).
//
// urgent makes a plain ACK go like those: the ACK of a WRITE of no bytes,
// which a requester posts only to learn that the writes before it are
// placed (p2p's fence of a window's Puts) and then waits for; held back,
// it waited for a look into the socket first.
func (l *link) respond(r *softrc.Response, urgent bool) {
	l.mu.Lock()
	if l.respClosed {
		l.mu.Unlock()
		r.Done()
		return
	}
	if k := len(l.resps); r.Op == softrc.FrameAck && k > 0 && l.resps[k-1].Op == softrc.FrameAck {
		// An ACK acknowledges every earlier request too, so it replaces
		// the one queued before it: a window of 32 small WRITEs drew 32
		// ACK frames, and their requester handled each.
		l.resps[k-1].Done()
		l.resps[k-1] = *r
		l.merged.Add(1)
	} else {
		l.resps = append(l.resps, *r)
	}
	l.nresps.Add(1)
	l.mu.Unlock()
	op, n := r.Op, len(r.Data)
	*r = softrc.Response{}
	if op != softrc.FrameAck || urgent {
		if n <= holdMax && l.frameBuffered() {
			l.urgentHeld = true // readFrame sends once no whole frame is left
			return
		}
		l.sendUrgent()
	}
}

// sendUrgent sends the queued responses, which hold more than ACKs.
func (l *link) sendUrgent() {
	l.urgentHeld = false
	l.urgentSends.Add(1)
	l.sendResps()
}

// sendResps sends the queued responses from the reading side: itself if
// the link is idle and that cannot block, else by the writer goroutine.
func (l *link) sendResps() {
	l.respSends.Add(1)
	l.Kick()
}

// beforeBlock readies the link for a wait in the kernel: the responses
// held back go now, as nothing may wait on them longer, and the socket
// signals arrivals again (loud).
func (l *link) beforeBlock() {
	if l.nresps.Load() > 0 {
		l.sendResps()
	}
	l.loud()
}

// largeMemory is how many small frames with data after a large one a
// poller reads only once they are all queued (see pollFrame), and after
// one larger than the read buffer, whose headers are read alone (readFrame).
const largeMemory = 8

// remember updates one of a link's memories of large frames (hugeSeen,
// aloneSeen, queuedSeen, largeSeen) for a frame: a large one sets it to
// largeMemory, a small one with data counts it down.
func remember(seen *int, large, data bool) {
	if large {
		*seen = largeMemory
	} else if data && *seen > 0 {
		*seen--
	}
}

// holdMax is the largest response respond holds for the next frames'.
const holdMax = 1 << 20

// reader is the link's own reading goroutine: it holds the token whenever
// no poller does (see the comment at the top of this file).
func (l *link) reader() {
	defer l.t.wg.Done()
	for {
		select {
		case <-l.bgWake:
		case <-l.done:
			return
		}
		select {
		case <-l.tok:
		default:
			continue // a poller has it; it wakes us, or the grace timer does
		}
		l.holder.Store(holderReader)
		l.loud() // its reads wait in the network poller (a poller leaves it quiet)
		var err error
		for l.handoff.Load() || l.want.Load() == 0 {
			err = l.readFrame()
			l.handoff.Store(false) // the large frame a poller left us is done
			if err == errInterrupted {
				err = nil
			} else if err != nil {
				break
			}
		}
		l.holder.Store(holderNone)
		l.tok <- struct{}{}
		if err != nil {
			l.fail(err)
			return
		}
		// A poller asked for the token. Should it give up waiting before
		// taking it, the grace timer brings us back.
		l.armGrace()
	}
}

// Drive implements softrc.Driver: it reads frames on the caller's goroutine
// until cq has a completion (or closes), ctx ends or the link fails.
func (l *link) Drive(ctx context.Context, cq *softrc.CQ) bool {
	if l.t.opts.PollGrace < 0 || l.handoff.Load() {
		return false // the reader goroutine drives (or has a large frame to take)
	}
	switch l.takeToken(ctx, cq.Signal()) {
	case tokenBusy:
		return false
	case tokenGiveUp, tokenDone:
		return true
	}
	l.holder.Store(holderPoller)
	var err error
	large := false
	for !cq.Pending() && ctx.Err() == nil {
		if err = l.pollFrame(ctx, cq); err == errInterrupted {
			err = nil
		} else if err == errLarge {
			// Before the token goes back: Drive leaves it to the reader
			// goroutine until that has taken the frame.
			l.handoff.Store(true)
			err, large = nil, true
			break
		} else if err != nil {
			break
		}
	}
	// Frames that arrived with ours are handled now rather than left to the
	// reader goroutine (a hand-off); a partial one is the reader's.
	for err == nil && l.frameBuffered() {
		err = l.readFrame()
	}
	l.unwatchDrive()
	buffered := l.br.Buffered() > 0
	if l.mid {
		// A suspended frame: the reader goroutine finishes it at once (its
		// sender is writing it now). Set before the token goes back, as
		// for a large frame.
		l.handoff.Store(true)
		large = true
	}
	l.holder.Store(holderNone)
	l.lastPoll.Store(l.now())
	l.tok <- struct{}{}
	// Load parked after storing holder (Parked does the opposite), so that
	// a waiter parking now is seen here or sees no driver there.
	urgent := buffered || large || l.parked.Load() > 0
	if err != nil {
		l.fail(err)
		return true
	}
	if urgent {
		l.wakeReader()
	} else {
		l.armGrace()
	}
	return true
}

// What takeToken got.
const (
	tokenTaken  = iota
	tokenBusy   // another poller holds the token
	tokenGiveUp // sig fired or ctx ended while the reader goroutine held it
	tokenDone   // the link is done
)

// takeToken takes the read token for a poller: at once when it is free,
// else from the reader goroutine, whose blocked read it interrupts (a read
// deadline in the past) and which hands it over at a frame boundary.
func (l *link) takeToken(ctx context.Context, sig <-chan struct{}) int {
	select {
	case <-l.tok:
		return tokenTaken
	default:
	}
	if l.holder.Load() == holderPoller {
		return tokenBusy
	}
	l.want.Add(1)
	defer l.want.Add(-1)
	_ = l.c.SetReadDeadline(aLongTimeAgo)
	select {
	case <-l.tok:
		return tokenTaken
	case <-sig:
	case <-ctx.Done():
	case <-l.done:
		return tokenDone
	}
	return tokenGiveUp
}

// queuedDirectMin is the least payload DriveQueued reads from the socket
// straight into place, once frames that large come (queuedSeen), rather
// than with its header through the read buffer: it then costs a header
// read and a look into the socket besides the payload's read. 4 hosts x 2
// ranks, alltoall at 16-32 KiB blocks took 1.04-1.06 of the time so, at
// 128 KiB-1 MiB 0.89-0.98; a 64 KiB block (its frame a little more) reads
// as before.
const queuedDirectMin = 96 << 10

// DriveQueued implements softrc.QueuedDriver: it handles, on the caller's
// goroutine, the whole frames that have arrived, and never waits for the
// socket. It takes the token as Drive does (from a reader goroutine
// blocked in a read, by interrupting it: a switch to that goroutine and
// back, with no sleep in the kernel), and leaves it as Drive does, so the
// reader goroutine stays out while pollers keep coming back. left reports
// work it could not do: another poller holds the token, the next frame
// is larger than the read buffer (the reader goroutine streams it), the
// writer goroutine is writing (it may wait for the network poller), or
// ctx ended first.
func (l *link) DriveQueued(ctx context.Context, cq *softrc.CQ) (took, left bool) {
	if l.rc == nil || l.t.opts.PollGrace < 0 || l.handoff.Load() || l.writing.Load() {
		return false, true // the link's goroutines have the work (see Incoming)
	}
	switch l.takeToken(ctx, nil) {
	case tokenBusy, tokenGiveUp:
		return false, true
	case tokenDone:
		return false, false
	}
	l.holder.Store(holderPoller)
	var err error
	large := false
	l.sr.drained = false
	for {
		if !l.frameBuffered() {
			need, sized, derr := l.nextFrameLen()
			if derr != nil {
				err = derr
				break
			}
			if need > l.br.Size() {
				l.handoff.Store(true) // as Drive leaves a large frame (errLarge)
				large = true
				break
			}
			// A large payload all queued goes from the socket straight
			// into place (payload.ReadFull) rather than through the
			// buffer and a copy out of it: a crowded host's 128 KiB READ
			// responses, a collective's steered SENDs. Part of one is
			// buffered as before: the socket may not hold it whole.
			direct := sized && need-l.br.Buffered() >= queuedDirectMin && l.restQueued(need) // false mid-frame
			if !direct {
				if l.sr.drained {
					// The last read emptied the socket: another would only
					// find nothing (a system call for EAGAIN). What comes
					// later, the next poll's look at the socket finds.
					break
				}
				l.sr.noBlock = true
				// After large frames a header is read with at most a few
				// small frames' worth, so that a large payload behind it
				// stays in the socket (above).
				l.sr.hdrOnly = !sized && l.queuedSeen > 0
				_, perr := l.br.Peek(need)
				l.sr.noBlock, l.sr.hdrOnly = false, false
				if perr != nil && perr != errWouldBlock {
					err = perr
					break
				}
				if !l.frameBuffered() {
					if l.br.Buffered() < HeaderLen || need > HeaderLen {
						break // the rest has yet to come
					}
					continue // the header is in: now the payload it announces
				}
			}
		}
		if err = l.readFrame(); err != nil {
			break
		}
		took = true
		if l.nresps.Load() >= ackHoldMax {
			l.sendResps() // as pollFrame does while frames stream in
		}
	}
	// The ACKs held back ride on the next frame this side sends, which in
	// a collective usually follows at once, or go PollGrace from now
	// (ackFlush), not with the grace timer: pollers coming back keep
	// postponing that. Sent here, each cost a write before the caller got
	// to its completion, and a wake-up of the peer's reader for nothing
	// but ACKs, on hosts whose ranks share their cores.
	if err == nil && l.nresps.Load() > 0 {
		l.armAckFlush()
	}
	buffered := l.br.Buffered() > 0
	l.holder.Store(holderNone)
	l.lastPoll.Store(l.now())
	l.tok <- struct{}{}
	if err != nil {
		l.fail(err)
		return took, false
	}
	if buffered || large || l.parked.Load() > 0 {
		l.wakeReader()
	} else {
		l.armGrace()
	}
	return took, large
}

// pollFrame is readFrame for a poller, which must honour ctx and its CQ:
// it blocks only while nothing of the next frame has been handled, in an
// interruptible wait, until the whole frame is buffered (or, if larger than
// the buffer, queued in the socket: awaitQueued), and then handles it
// without blocking. A READ response larger than the buffer it streams
// (streamFrame), and so a SEND unless its rest is queued already. Another
// frame larger than pollFrameMax, or one larger than awaitQueued can wait
// for, is left to the reader goroutine (errLarge): its payload
// goes straight to memory as it arrives, in reads that are not
// interruptible, and it takes long enough that the hand-off matters less.
func (l *link) pollFrame(ctx context.Context, cq *softrc.CQ) error {
	need, sized := HeaderLen, false
	var start, spinEnd time.Time // when the wait began, when polling the socket stops (Options.PollSpin)
	hit, missed, skipped := false, false, false
	defer func() {
		if !start.IsZero() {
			l.waitEnded(time.Since(start), skipped, missed)
		}
	}()
	for {
		if !sized {
			var err error
			if need, sized, err = l.nextFrameLen(); err != nil {
				return err
			}
			if sized && need > l.br.Size() && l.streamable() && !l.restQueued(need) {
				return l.streamFrame(ctx, cq)
			}
			if sized && need > pollFrameMax {
				return errLarge
			}
		}
		if sized && l.br.Buffered() >= need {
			if hit && !missed {
				l.spinBackoff = 0
			}
			return l.readFrame()
		}
		// The rest of the payload, if that much, goes straight into place
		// once it is queued (payload.ReadFull), rather than through the
		// buffer: its header was read alone (aloneSeen).
		direct := sized && need-l.br.Buffered() >= directMin
		if direct && l.knownQueued >= need-l.br.Buffered() {
			// The look before the header's read found it queued already.
			l.knownQueued = 0
			l.aheadReads.Add(1)
			if hit && !missed {
				l.spinBackoff = 0
			}
			return l.readFrame()
		}
		large := sized && need > l.br.Size()
		// About to wait: the ACKs held back go first (see respond), unless
		// the next frame is arriving already. Then the peer is streaming
		// frames to us and does not wait for these ACKs, and writing them
		// costs a syscall per frame (5 µs here, as much as half a 64 KiB
		// frame's copy); they go once the stream pauses, before this
		// goroutine sleeps, or when ackHoldMax are held.
		if n := l.nresps.Load(); n > 0 && (n >= ackHoldMax || l.t.opts.PollSpin <= 0 || !l.arriving()) {
			l.sendResps()
		}
		queued := false
		if l.t.opts.PollSpin > 0 {
			// Poll the socket for a while before sleeping in the kernel
			// (Options.PollSpin), until the rest of the frame is there: a
			// reply that comes within it is read without the wake-up,
			// which costs more than the message.
			now := time.Now()
			if spinEnd.IsZero() {
				start, spinEnd = now, now.Add(l.t.opts.PollSpin)
				if l.spinSkip > 0 && !l.t.opts.PollYield {
					// Recent spins ran out long before their frame came:
					// sleep at once (see spinMissed).
					l.spinSkip--
					spinEnd, skipped = now, true
				}
			}
			var got bool
			if now.Before(spinEnd) {
				// Read as it comes only what is likely a small frame: none
				// of the last few with data was large (a frame's first
				// bytes do not say how long it is until its header is in,
				// and a large message's frames come with small ones: credits,
				// FINs).
				if !l.spinLost {
					l.quiet()
				}
				if need > spinFillMax || direct || (!sized && (l.largeSeen > 0 || l.aloneSeen > 0)) {
					got = l.spinUntilQueued(ctx, cq, need-l.br.Buffered(), spinEnd)
				} else {
					got = l.spinFill(ctx, cq, need, spinEnd)
				}
				missed = missed || !got // the backoff is decided once the frame is here (waitEnded)
				// Only while spins find their frames does quieting the
				// socket pay: when they run out, each wait would pay the
				// raise and the reset (two system calls) for nothing.
				l.spinLost = !got
				hit = hit || got
			}
			if got {
				if cq.Pending() || ctx.Err() != nil {
					return errInterrupted
				}
				queued = true
			}
			// Either what the frame needs is queued now, and the read
			// below takes it without sleeping, or the time is up.
			if queued && sized && (need > spinFillMax || direct) {
				// All of it is here: handle it now, reading the part of
				// its payload not yet buffered straight into place
				// (payload.ReadFull) rather than through the buffer.
				if !missed {
					l.spinBackoff = 0
				}
				return l.readFrame()
			}
		}
		if !queued {
			l.beforeBlock()
			// Only a read that may sleep needs ctx's end to interrupt it:
			// what the spin found queued is read without sleeping, and
			// the registration (context.AfterFunc) allocates.
			l.watch(ctx)
		}
		l.pblocked.Store(true)
		if cq.Pending() || ctx.Err() != nil {
			l.pblocked.Store(false)
			return errInterrupted
		}
		var err error
		if large {
			// It cannot be buffered: wait until it is all in the socket,
			// then handle it without blocking; its payload goes from there
			// straight into place. (A frame that fits is buffered as it
			// arrives: reading its header alone, then waiting for the
			// rest in the socket, cost more system calls and wake-ups
			// than the copy it saved.)
			err = l.awaitQueued(need)
		} else {
			l.sr.intr = true
			// As in readFrame; after frames that fit the buffer
			// (aloneSeen), only when the spin found the header queued,
			// with less than a buffer's worth: a waiter that blocks
			// buffers the payload as it arrives anyway, and a stream of
			// such frames (a window of eager messages) costs fewer system
			// calls read a buffer at a time than two per frame.
			l.sr.hdrOnly = !sized && (l.hugeSeen > 0 || queued && l.aloneSeen > 0 && l.lastQueued() < l.br.Size())
			_, err = l.br.Peek(need)
			l.sr.intr, l.sr.hdrOnly = false, false
		}
		l.pblocked.Store(false)
		if err != nil {
			return err
		}
		if large {
			if queued && !missed {
				l.spinBackoff = 0
			}
			return l.readFrame()
		}
	}
}

// spinBackoffMax bounds how many waits in a row skip their spin after spins
// that ran out (spinMissed).
const spinBackoffMax = 64

// waitEnded updates the spin backoff once a wait of pollFrame is over (took
// is how long it waited). Only a wait that outlasted twice PollSpin counts
// as a miss (spinMissed): one that ran out by less is as likely to have
// waited on a peer that slept, because its own spin had run out, as on a
// peer that computes. Counted as misses, such waits kept both ranks of a
// ping-pong sleeping in turn, each wake-up making the other's next spin
// run out, as soon as a half round trip and a wake-up together took longer
// than PollSpin. For the same reason a wait that skipped its spin and
// still ended within twice PollSpin makes the next wait spin again.
func (l *link) waitEnded(took time.Duration, skipped, missed bool) {
	near := took <= 2*l.t.opts.PollSpin
	switch {
	case skipped && near:
		l.spinSkip = 0
	case missed && !near:
		l.spinMissed()
	}
}

// spinMissed notes a wait that outlasted its spin by far (waitEnded): the
// next waits sleep at once, twice as many after each miss in a row (up to
// spinBackoffMax), until a spin finds its frame again. Waits that outlast
// PollSpin by far (the peer computes, or moves a large message through
// both kernels) gain nothing from a spin, and on a busy machine it takes
// the CPU the peer or the other goroutines need; the waits of a ping-pong
// of small messages, which the spin is for, keep finding their frames.
func (l *link) spinMissed() {
	l.spinBackoff = min(max(1, 2*l.spinBackoff), spinBackoffMax)
	l.spinSkip = l.spinBackoff
	l.spinMisses.Add(1)
}

// Interrupt implements softrc.Driver.
func (l *link) Interrupt() {
	if l.pblocked.Load() {
		_ = l.c.SetReadDeadline(aLongTimeAgo)
	}
}

// Parked implements softrc.Driver: a waiter parked because another
// goroutine drives the link; when that driver stops, the reader goroutine
// must take over at once.
func (l *link) Parked(on bool) {
	if on {
		l.parked.Add(1)
		if l.holder.Load() == holderNone {
			l.wakeReader()
		}
	} else {
		l.parked.Add(-1)
	}
}

func (l *link) wakeReader() {
	select {
	case l.bgWake <- struct{}{}:
	default:
	}
}

// now is a monotonic clock reading in nanoseconds.
func (l *link) now() int64 { return int64(time.Since(l.epoch)) }

// armGrace makes sure the grace timer will check, PollGrace after the last
// poller left, whether the reader goroutine must resume.
func (l *link) armGrace() {
	if !l.graceArmed.Swap(true) {
		l.grace.Reset(l.t.opts.PollGrace)
	}
}

// armAckFlush makes sure the ACKs a poller held back (DriveQueued) go
// PollGrace from now at the latest, far below the peer's ACK timeout.
func (l *link) armAckFlush() {
	if !l.ackArmed.Swap(true) {
		l.ackFlush.Reset(l.t.opts.PollGrace)
	}
}

func (l *link) ackFlushFired() {
	l.ackArmed.Store(false)
	if l.nresps.Load() > 0 {
		l.sendResps()
	}
}

func (l *link) graceFired() {
	l.graceArmed.Store(false)
	switch l.holder.Load() {
	case holderReader:
		return
	case holderPoller:
		return // its Drive re-arms the timer when it ends
	}
	if left := time.Duration(l.lastPoll.Load() + int64(l.t.opts.PollGrace) - l.now()); left > 0 {
		if !l.graceArmed.Swap(true) {
			l.grace.Reset(left)
		}
		return
	}
	l.wakeReader()
}

// frameBuffered reports whether a whole frame is buffered.
func (l *link) frameBuffered() bool {
	need, sized, err := l.nextFrameLen()
	// A malformed header is the reader's to report (readFrame would too).
	return err == nil && sized && l.br.Buffered() >= need
}

// nextFrameLen is the length of the next frame, its header included, once
// that header is buffered (sized); before, HeaderLen. err reports a
// malformed header. Mid-frame (a suspended READ response), it is what is
// left of that frame's payload.
func (l *link) nextFrameLen() (need int, sized bool, err error) {
	if l.mid {
		return l.fs.pl.left, true, nil // the rest of a suspended frame
	}
	fs := &l.fs
	if fs.nextOK {
		return HeaderLen + fs.next.PayloadLen(), true, nil
	}
	if l.br.Buffered() < HeaderLen {
		return HeaderLen, false, nil
	}
	b, _ := l.br.Peek(HeaderLen)
	h, err := DecodeHeader(b, fs.maxMsg)
	if err != nil {
		return HeaderLen, false, err
	}
	fs.next, fs.nextOK = h, true
	return HeaderLen + h.PayloadLen(), true, nil
}

// watch makes sure ctx's end interrupts a poller's blocked read, until
// its Drive ends (unwatch). The registration lives no longer than the
// Drive: callers commonly cancel a per-wait ctx right after the wait (p2p
// does), and a registration still in place then would start the
// AfterFunc's goroutine for nothing, a scheduler wake-up per message.
// Registering again for each Drive costs far less. It is dropped for good
// when the link fails, so that it does not keep the link reachable.
func (l *link) watch(ctx context.Context) {
	if ctx.Done() == nil {
		return
	}
	l.watchMu.Lock()
	if !l.unwatched && l.unwatch == nil {
		l.unwatch = context.AfterFunc(ctx, l.interruptFn)
	}
	l.watchMu.Unlock()
}

// unwatchDrive ends the Drive's ctx registration.
func (l *link) unwatchDrive() {
	l.watchMu.Lock()
	if l.unwatch != nil {
		l.unwatch()
		l.unwatch = nil
	}
	l.watchMu.Unlock()
}

// dropWatch ends the ctx registration for good (the link failed), so it
// does not keep the link reachable.
func (l *link) dropWatch() {
	l.watchMu.Lock()
	if l.unwatch != nil {
		l.unwatch()
	}
	l.unwatch, l.unwatched = nil, true
	l.watchMu.Unlock()
}
