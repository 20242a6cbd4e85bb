package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// link is one connected QP pair's TCP connection. Whoever holds its read
// token (its reader goroutine, or a goroutine waiting on the QP's CQ: see
// read.go) is the QP's responder and completer: it reads each frame header,
// and the payload straight into registered memory (or local READ buffers).
// Whoever holds wmu is the requester's wire: the posting goroutine or the
// reading side when the socket takes the frames at once (non-blocking), the
// writer goroutine otherwise; it gathers queued responses and the QP's next
// requests into one writev. The reading side never blocks on a write, so two
// ends busy writing large messages to each other cannot deadlock: each
// end's reading side keeps draining its socket.
type link struct {
	t        *transport
	q        *softrc.QP
	c        net.Conn
	rc       syscall.RawConn
	br       *bufio.Reader
	peerQP   uint32
	kick     chan struct{}
	done     chan struct{}
	progress func()
	once     sync.Once
	epoch    time.Time

	// read side (read.go)
	tok         chan struct{} // the read token, in the channel when free
	holder      atomic.Int32  // holderNone, holderReader or holderPoller
	want        atomic.Int32  // pollers waiting for the reader goroutine's token
	pblocked    atomic.Bool   // the polling holder is (about to be) blocked at a frame boundary
	parked      atomic.Int32  // CQ waiters parked while another goroutine drives
	handoff     atomic.Bool   // a poller left a large frame to the reader goroutine
	writing     atomic.Bool   // the writer goroutine is writing: it may wait for the network poller (Incoming)
	lastPoll    atomic.Int64  // now() when a poller last put the token back
	graceArmed  atomic.Bool
	grace       *time.Timer
	ackArmed    atomic.Bool
	ackFlush    *time.Timer // sends the ACKs DriveQueued held back (armAckFlush)
	bgWake      chan struct{}
	interruptFn func()
	watchMu     sync.Mutex
	unwatch     func() bool // the Drive's ctx registration (see watch)
	unwatched   bool
	sr          sockReader
	fs          frameState
	largeSeen   int          // small frames with data to go before spinFill (pollFrame)
	hugeSeen    int          // small frames with data to go before headers are read with what follows (readFrame)
	aloneSeen   int          // frames with data under Options.HeaderAloneMin to go before a poller reads headers with what follows (pollFrame)
	queuedSeen  int          // frames with data under queuedDirectMin to go before DriveQueued reads headers with what follows
	knownQueued int          // bytes still queued in the socket after the last read, when a look just before it told (sockReader)
	spinBackoff int          // how many waits the last miss made skip their spin (see spinMissed)
	spinSkip    int          // waits still to skip their spin (see spinMissed)
	spinMisses  atomic.Int32 // spins that ran out (for tests)
	lowatHigh   bool         // SO_RCVLOWAT is raised while a poller polls (quiet)
	spinLost    bool         // the last spin ran out before its frame came: do not quiet the next
	mid         bool         // a READ response's or SEND's handling is suspended mid-payload (streamFrame)
	midSend     bool         // the frame suspended is a SEND
	streamed    atomic.Int32 // READ responses a waiter streamed to their end (for tests)
	suspends    atomic.Int32 // streamed READ responses suspended mid-payload (for tests)
	runs        atomic.Int32 // WRITE_RUN frames written (for tests)
	streamBytes atomic.Int64 // payload bytes waiters streamed (for tests)
	spinGaveUp  atomic.Int32 // streaming reads that polled the socket for Options.PollSpin in vain and slept (for tests)
	spinStream  atomic.Int64 // payload bytes streaming reads took by polling the socket (spinRead; for tests)
	writes      atomic.Int32 // write system calls of the posting side (writeNow; for tests)
	urgentHeld  bool         // resps holds more than ACKs, sent once no whole frame is buffered (see respond)
	urgentSends atomic.Int32 // how often the reading side sent such responses (for tests)
	spinReads   atomic.Int32 // non-blocking reads that found bytes (spinFill; for tests)
	emptyReads  atomic.Int32 // non-blocking reads that found nothing (for tests)
	hdrBatches  atomic.Int32 // header reads that took the small frames queued with it (for tests)
	aheadReads  atomic.Int32 // payloads a poller read without a look, the look before their header's read having found them (for tests)
	incomings   atomic.Int32 // Incoming's looks at the socket (for tests)
	respSends   atomic.Int32 // how often the reading side sent its queued responses (for tests)
	bufCopied   *uint64      // payload bytes copied out of the read buffer rather than read in place (for tests: copiedBytes); allocated alone, so 64-bit aligned on 32-bit platforms
	writerKicks atomic.Int32 // work handed to the writer goroutine (wakeWriter; for tests)
	qw          queueWait    // awaitQueued's scratch

	// awaitTimer ends a poller's wait for a whole frame (awaitQueued) after
	// awaitQueuedMax.
	awaitTimer *time.Timer

	mu         sync.Mutex
	resps      []softrc.Response // responses queued by the reading side
	nresps     atomic.Int32      // the responses resps stands for, merged ACKs included (respond); read without mu
	merged     atomic.Int32      // ACKs merged into a later one (respond; for tests)
	respClosed bool              // the writer is gone: release, do not queue

	wmu          sync.Mutex
	ss           sendState
	ws           rawWriteState
	lending      bool         // a WriteLent call holds wmu: the batch may point into a lent tail
	ownedCarries atomic.Int32 // partial writes whose rest ownCarry copied (for tests)
}

func (t *transport) startLink(q *softrc.QP, c net.Conn, hbr *bufio.Reader, peerQP uint32) {
	t.congest(c, q)
	l := &link{t: t, q: q, c: c, peerQP: peerQP, kick: make(chan struct{}, 1), done: make(chan struct{}), progress: q.Progress,
		epoch: time.Now(), tok: make(chan struct{}, 1), bgWake: make(chan struct{}, 1)}
	if sc, ok := c.(syscall.Conn); ok {
		l.rc, _ = sc.SyscallConn()
	}
	// Frames may have arrived with the handshake, in its reader's buffer.
	pre, _ := hbr.Peek(hbr.Buffered())
	l.sr = sockReader{l: l, pre: pre}
	l.br = bufio.NewReaderSize(&l.sr, readBufSize)
	l.bufCopied = new(uint64)
	l.fs.pl = payload{br: l.br, sr: &l.sr, progress: l.progress, copied: l.bufCopied, streamed: &l.streamBytes}
	l.fs.maxMsg = t.dev.Caps().MaxMsgSize
	l.interruptFn = l.Interrupt
	l.ws.init(l)
	l.qw.init()
	l.grace = time.AfterFunc(time.Hour, l.graceFired)
	l.grace.Stop()
	l.ackFlush = time.AfterFunc(time.Hour, l.ackFlushFired)
	l.ackFlush.Stop()
	l.awaitTimer = time.AfterFunc(time.Hour, l.awaitFired)
	l.awaitTimer.Stop()
	l.tok <- struct{}{}
	l.bgWake <- struct{}{}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = c.Close()
		return
	}
	t.links[l] = struct{}{}
	t.mu.Unlock()
	// Attach first: a frame that fails the reader at once must find the
	// link attached, or its loss would go unnoticed by the QP.
	if !q.Attach(l) {
		l.fail(fmt.Errorf("qp %#x no longer waits for a connection", q.Num()))
		return
	}
	t.wg.Add(2)
	go l.reader()
	go l.writer()
}

// Kick implements softrc.Link: requests may go, posted or let go by a
// completion (the READ a window of rendezvous waits to post once an
// earlier one's response is in). Where a write never blocks, the kicking
// goroutine (the reading side, for a completion) writes what the socket
// takes at once itself (KickPost), as PostSend does: waking the writer
// goroutine instead cost a hand-off per message in a window of 1 MiB
// rendezvous each way (bibw: about 2900 wake-ups per 3500 messages).
func (l *link) Kick() {
	if inlineNeverBlocks {
		l.KickPost()
		return
	}
	l.wakeWriter()
}

// wakeWriter hands what is left to write to the writer goroutine.
func (l *link) wakeWriter() {
	l.writerKicks.Add(1)
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *link) Close() { l.fail(ErrDisconnected) }

// awaitFired interrupts awaitQueued's wait (awaitTimer), as a poller that
// wants the token does. Should it fire as the wait ends, the next read
// takes the past deadline for a stale interrupt and clears it.
func (l *link) awaitFired() { _ = l.c.SetReadDeadline(aLongTimeAgo) }

func (l *link) fail(err error) {
	l.once.Do(func() {
		close(l.done)
		l.grace.Stop()
		l.ackFlush.Stop()
		l.awaitTimer.Stop()
		l.dropWatch()
		_ = l.c.Close()
		l.q.LinkLost(l, err)
		l.t.mu.Lock()
		delete(l.t.links, l)
		l.t.mu.Unlock()
		if !errors.Is(err, ErrDisconnected) && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			l.t.log.Warn("tcp: connection lost", "device", l.t.dev.Name(), "qp", l.q.Num(), "peer_qp", l.peerQP,
				"remote", l.c.RemoteAddr().String(), "err", err)
		}
	})
}

const (
	// maxBatch is the most requests one writev takes: a window of 64
	// small Puts and their fence is one system call (put_bw over tcp
	// 1.2-1.5x the rate of batches of 32, three calls).
	maxBatch = 128
	// inlineMax is the largest request payload PostSend writes itself (as
	// much as the socket takes at once; the writer goroutine writes the
	// rest). A hand-off to the writer costs more than the copy into the
	// socket of a message of a few MiB, so only larger ones go to it whole.
	inlineMax = 4 << 20
)

// The send side is guarded by wmu: whoever holds it (the writer goroutine,
// or PostSend writing small requests itself) owns the batch state below.
type sendState struct {
	reqs [maxBatch]softrc.Request
	nreq int               // reqs[:nreq] are written (or in carry) and await Done
	out  []softrc.Response // responses being written; await Done
	// stage holds the batch's headers and small payloads, in frame order;
	// stage[start:] is the run not yet in bufs (see addPayload).
	stage []byte
	start int
	bufs  net.Buffers
	carry net.Buffers // the unwritten rest of a batch whose inline write timed out
	own   []byte      // ownCarry's copy of a carry, reused
	chunk net.Buffers
	w     net.Buffers // what WriteTo consumes; a field so it does not escape per call
}

func (l *link) writer() {
	defer l.t.wg.Done()
	defer func() {
		// Release everything still pointing into registered memory; the
		// reader and KickPost check respClosed / done and release their own.
		l.wmu.Lock()
		l.ss.carry = nil
		l.finishBatch(false)
		l.wmu.Unlock()
		l.mu.Lock()
		for i := range l.resps {
			l.resps[i].Done()
		}
		l.resps = nil
		l.nresps.Store(0)
		l.respClosed = true
		l.mu.Unlock()
	}()
	for {
		select {
		case <-l.kick:
		case <-l.done:
			return
		}
		l.wmu.Lock()
		l.writing.Store(true)
		l.t.writers.Add(1)
		var err error
		if len(l.ss.carry) > 0 {
			err = l.write(l.ss.carry)
			l.ss.carry = nil
			l.finishBatch(err == nil)
		}
		for err == nil {
			var k int
			if k, err = l.batch(^uint32(0), false); k == 0 {
				break
			}
			if err == nil {
				err = l.write(l.ss.bufs)
				l.finishBatch(err == nil)
			}
		}
		l.t.writers.Add(-1)
		l.writing.Store(false)
		l.wmu.Unlock()
		if err != nil {
			l.fail(err)
			return
		}
	}
}

// KickPost is PostSend's kick (and the reading side's, for responses): if
// nobody is writing, write the new small requests and any small queued
// responses right here, saving the hand-off to the writer goroutine, but
// only what the socket takes at once: the rest is left to the writer.
// Work queued meanwhile (the reading side's responses, whose own KickPost
// found this one writing) it writes too, in up to kickPostRounds batches,
// rather than waking the writer for it.
func (l *link) KickPost() {
	if !l.wmu.TryLock() {
		l.wakeWriter()
		return
	}
	l.kickPostHeld(nil)
}

// WriteLent implements softrc.LentWriter: KickPost's writes in the posting
// goroutine, for a request whose tail the poster lends for the call only
// (softrc.QP.PostSendLentPair): written from the poster's memory into the
// socket, the one copy a frame's body then takes on this side.
func (l *link) WriteLent(post, settle func()) bool {
	if !l.wmu.TryLock() {
		return false
	}
	if len(l.ss.carry) > 0 {
		// The socket is backed up: the request would wait behind the
		// rest of a batch, and the tail would be copied anyway.
		l.wmu.Unlock()
		return false
	}
	post()
	l.lending = true
	l.kickPostHeld(settle)
	return true
}

// kickPostHeld is KickPost once it holds wmu, which it lets go. While
// lending, what the socket did not take is copied first (ownCarry), and
// settle runs before wmu goes.
func (l *link) kickPostHeld(settle func()) {
	more := len(l.ss.carry) > 0 // the rest of a partial write: the writer's
	var err error
	for round := 1; len(l.ss.carry) == 0; round++ {
		var k int
		if k, err = l.batch(inlineMax, true); k > 0 && err == nil {
			l.ss.carry, err = l.writeNow(l.ss.bufs)
			if len(l.ss.carry) == 0 {
				l.finishBatch(err == nil)
			}
		}
		more = len(l.ss.carry) > 0 || l.q.HasWork() || l.nresps.Load() > 0
		if !more || err != nil || k == 0 || round == kickPostRounds {
			break // what is left is the writer's (or KickPost has done its share)
		}
	}
	if l.lending {
		if len(l.ss.carry) > 0 {
			l.ownCarry()
		}
		l.lending = false
	}
	if settle != nil {
		settle()
	}
	select {
	case <-l.done:
		// The writer may be gone already: nobody else will finish this batch.
		l.ss.carry = nil
		l.finishBatch(false)
		more = false
	default:
	}
	l.wmu.Unlock()
	if err != nil {
		l.fail(err)
		return
	}
	l.mu.Lock()
	more = more || len(l.resps) > 0
	l.mu.Unlock()
	if more {
		l.wakeWriter()
	}
}

// ownCarry copies the unwritten rest of a batch into the link's memory: it
// may point into a tail lent for a WriteLent call only. The copy goes to
// a buffer the link keeps (ss.own) up to ownCarryKeep bytes: a carry is
// written whole before another is made (nothing is written while one is
// left), and a stream that fills the socket makes one every few frames,
// whose allocation each time made 64 KiB messages 0.56x as fast in
// rdmabench bw with a short warm-up.
func (l *link) ownCarry() {
	own := l.ss.own[:0]
	for _, b := range l.ss.carry {
		own = append(own, b...)
	}
	if cap(own) <= ownCarryKeep {
		l.ss.own = own
	}
	l.ss.carry = append(l.ss.carry[:0], own)
	l.ownedCarries.Add(1)
}

// ownCarryKeep bounds the carry copy a link keeps for the next one.
const ownCarryKeep = 1 << 20

// kickPostRounds bounds the batches one KickPost writes.
const kickPostRounds = 4

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// batch gathers queued responses and up to maxBatch requests into ss.bufs
// and returns how many frames it gathered. With inline set it takes the
// responses only if all are small (they must go out in order) and requests
// only up to inlineMax bytes of payload.
func (l *link) batch(limit uint32, inline bool) (int, error) {
	ss := &l.ss
	l.mu.Lock()
	take := true
	if inline {
		for i := range l.resps {
			if len(l.resps[i].Data) > inlineMax {
				take = false
				break
			}
		}
	}
	if take {
		ss.out, l.resps = l.resps, ss.out[:0]
		l.nresps.Store(0)
	}
	l.mu.Unlock()
	ss.stage, ss.start = ss.stage[:0], 0
	ss.bufs = ss.bufs[:0]
	for i := range ss.out {
		EncodeHeader(ss.reserve(HeaderLen), &ss.out[i].Header)
		ss.addPayload(ss.out[i].Data)
	}
	n := l.q.NextRequests(ss.reqs[:maxBatch], limit)
	for i := 0; i < n; {
		// Small WRITEs that ask for no ACK, one after another (a window of
		// Puts), go as one WRITE_RUN frame: one header to encode, decode
		// and check instead of one each. Either way the requests' payloads
		// follow in order.
		j := i
		for j < n && j-i < softrc.RunMax && softrc.RunMember(&ss.reqs[j]) {
			j++
		}
		if j-i >= 2 {
			var h softrc.Header
			hb := ss.reserve(HeaderLen)
			softrc.EncodeRun(&h, ss.reserve((j-i)*softrc.RunDescLen), ss.reqs[i:j])
			EncodeHeader(hb, &h)
			l.runs.Add(1)
		} else {
			j = i + 1
			EncodeHeader(ss.reserve(HeaderLen), &ss.reqs[i].Header)
		}
		for ; i < j; i++ {
			for _, d := range ss.reqs[i].Data {
				ss.addPayload(d)
			}
		}
	}
	ss.cut()
	ss.nreq = n
	return len(ss.out) + n, nil
}

// Payloads up to stageMax bytes are copied into the stage after their
// header, so that a run of small frames is one buffer of the writev: the
// kernel's cost per buffer made a writev of 65 one-byte writes (a header
// and a payload each) take 15.6 µs here, and of the same bytes in one
// buffer 7.3.
const stageMax = 512

// reserve appends n bytes to the stage and returns them. When the stage
// is full, the run so far goes into bufs and a larger stage starts; bufs
// keeps the old one alive until the batch is written.
func (ss *sendState) reserve(n int) []byte {
	at := len(ss.stage)
	if at+n > cap(ss.stage) {
		ss.cut()
		ss.stage, ss.start, at = make([]byte, 0, max(2*cap(ss.stage), n, 4096)), 0, 0
	}
	ss.stage = ss.stage[:at+n]
	return ss.stage[at : at+n : at+n]
}

// addPayload adds d to the batch after its header: copied into the stage
// when small, else as a buffer of its own (the writev reads it in place).
func (ss *sendState) addPayload(d []byte) {
	switch {
	case len(d) == 0:
	case len(d) <= stageMax:
		copy(ss.reserve(len(d)), d)
	default:
		ss.cut()
		ss.bufs = append(ss.bufs, d)
	}
}

// cut ends the stage's current run: it goes into bufs as one buffer.
func (ss *sendState) cut() {
	if end := len(ss.stage); end > ss.start {
		ss.bufs = append(ss.bufs, ss.stage[ss.start:end:end])
		ss.start = end
	}
}

// finishBatch releases what the last batch pointed into; sent says the
// batch was written whole, so its READ responses are served
// (softrc.Response.Sent).
func (l *link) finishBatch(sent bool) {
	ss := &l.ss
	for i := range ss.out {
		if sent {
			ss.out[i].Sent()
		}
		ss.out[i].Done()
	}
	ss.out = ss.out[:0]
	for i := range ss.nreq {
		ss.reqs[i].Done()
	}
	ss.nreq = 0
}

// write sends bufs with as few writev calls as possible, but at most about
// ProgressChunk bytes per call, telling the requester after each that its
// traffic moves (so the ACK timer measures a stall, not a message's size).
func (l *link) write(bufs net.Buffers) error {
	chunk := l.ss.chunk[:0]
	defer func() { l.ss.chunk = chunk[:0] }()
	for len(bufs) > 0 {
		chunk = chunk[:0]
		n := 0
		for len(bufs) > 0 && n < softrc.ProgressChunk {
			b := bufs[0]
			if room := softrc.ProgressChunk - n; len(b) > room {
				chunk = append(chunk, b[:room])
				bufs[0] = b[room:]
				n += room
				break
			}
			chunk = append(chunk, b)
			n += len(b)
			bufs = bufs[1:]
		}
		l.ss.w = chunk // WriteTo consumes its receiver
		if _, err := l.ss.w.WriteTo(l.c); err != nil {
			return err
		}
		if len(bufs) > 0 {
			l.progress()
		}
	}
	return nil
}

// copiedBytes is bufCopied, loaded atomically (for tests).
func (l *link) copiedBytes() int64 { return int64(atomic.LoadUint64(l.bufCopied)) }
