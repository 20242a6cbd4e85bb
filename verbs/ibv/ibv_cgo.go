//go:build linux && cgo && rdma

package ibv

// The only file that imports "C". Each function here is one libibverbs call
// (or a short C loop that builds a work-request chain from flat descriptors
// the Go side filled in), so that everything else, validation and
// bookkeeping included, is Go. The flat descriptor structs have Go twins
// (desc.go) whose layout init checks against C's.

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

struct rg_send {
	uint64_t wr_id, remote_addr, compare_add, swap;
	uint32_t rkey, sge_off, num_sge, opcode, flags;
	uint8_t imm[4];
};
struct rg_recv { uint64_t wr_id; uint32_t sge_off, num_sge; };
struct rg_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len, qp_num, src_qp, wc_flags;
	uint8_t imm[4];
};
struct rg_qp_attr {
	uint32_t state, access, pkey_index, port, path_mtu, dest_qpn, rq_psn, sq_psn;
	uint8_t dgid[16];
	uint16_t dlid;
	uint8_t min_rnr_timer, max_dest_rd_atomic, max_rd_atomic, timeout, retry_cnt, rnr_retry,
		is_global, sgid_index, hop_limit, pad;
};
struct rg_cap { uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline; };
struct rg_dev {
	uint64_t max_mr_size, node_guid;
	uint32_t max_qp, max_qp_wr, max_sge, max_cqe, max_qp_rd_atom, max_qp_init_rd_atom,
		atomic_cap, vendor_id, phys_port_cnt;
};
struct rg_port {
	uint32_t max_msg_sz, gid_tbl_len, lid;
	uint8_t state, max_mtu, active_mtu, link_layer, active_width, active_speed, pad[2];
};
struct rg_gid { uint8_t gid[16]; uint32_t index, type; };

static int rg_device_names(char *buf, int n) {
	int cnt = 0, off = 0;
	struct ibv_device **l = ibv_get_device_list(&cnt);
	if (!l) return -1;
	buf[0] = 0;
	for (int i = 0; i < cnt; i++) {
		const char *s = ibv_get_device_name(l[i]);
		int k = strlen(s);
		if (off + k + 2 > n) break;
		memcpy(buf + off, s, k); off += k; buf[off++] = '\n'; buf[off] = 0;
	}
	ibv_free_device_list(l);
	return cnt;
}

static struct ibv_context *rg_open(const char *name) {
	int cnt = 0;
	struct ibv_context *c = NULL;
	struct ibv_device **l = ibv_get_device_list(&cnt);
	if (!l) return NULL;
	errno = ENODEV;
	for (int i = 0; i < cnt; i++)
		if (strcmp(ibv_get_device_name(l[i]), name) == 0) { c = ibv_open_device(l[i]); break; }
	int e = errno;
	ibv_free_device_list(l);
	errno = e;
	return c;
}

static int rg_query_device(struct ibv_context *c, struct rg_dev *o) {
	struct ibv_device_attr a;
	int rc = ibv_query_device(c, &a);
	if (rc) { errno = rc; return -1; }
	o->max_mr_size = a.max_mr_size; o->node_guid = a.node_guid;
	o->max_qp = a.max_qp; o->max_qp_wr = a.max_qp_wr; o->max_sge = a.max_sge; o->max_cqe = a.max_cqe;
	o->max_qp_rd_atom = a.max_qp_rd_atom; o->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	o->atomic_cap = a.atomic_cap; o->vendor_id = a.vendor_id; o->phys_port_cnt = a.phys_port_cnt;
	return 0;
}

static int rg_query_port(struct ibv_context *c, int port, struct rg_port *o) {
	struct ibv_port_attr a;
	int rc = ibv_query_port(c, port, &a);
	if (rc) { errno = rc; return -1; }
	o->max_msg_sz = a.max_msg_sz; o->gid_tbl_len = a.gid_tbl_len; o->lid = a.lid;
	o->state = a.state; o->max_mtu = a.max_mtu; o->active_mtu = a.active_mtu; o->link_layer = a.link_layer;
	o->active_width = a.active_width; o->active_speed = a.active_speed;
	return 0;
}

static int rg_gid_table(struct ibv_context *c, int port, struct rg_gid *o, int max) {
	struct ibv_gid_entry *e = calloc(max, sizeof *e);
	if (!e) { errno = ENOMEM; return -1; }
	ssize_t n = ibv_query_gid_table(c, e, max, 0);
	int k = 0;
	for (ssize_t i = 0; i < n; i++) {
		if ((int)e[i].port_num != port) continue;
		memcpy(o[k].gid, e[i].gid.raw, 16); o[k].index = e[i].gid_index; o[k].type = e[i].gid_type; k++;
	}
	free(e);
	if (n < 0) { errno = -n; return -1; }
	return k;
}

static struct ibv_mr *rg_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t n, int access, uint32_t *lkey, uint32_t *rkey) {
	struct ibv_mr *mr = ibv_reg_mr(pd, (void *)addr, n, access);
	if (mr) { *lkey = mr->lkey; *rkey = mr->rkey; }
	return mr;
}

static int rg_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }

static int rg_create_cq(struct ibv_context *c, int depth, struct ibv_comp_channel *ch, struct ibv_cq **out) {
	struct ibv_cq *cq = ibv_create_cq(c, depth, NULL, ch, 0);
	*out = cq;
	return cq ? cq->cqe : -1;
}

static int rg_req_notify(struct ibv_cq *cq) {
	int rc = ibv_req_notify_cq(cq, 0);
	if (rc) { errno = rc; return -1; }
	return 0;
}

// Non-blocking: -1 with EAGAIN when the channel has no event.
static int rg_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq; void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx)) return -1;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

static int rg_poll(struct ibv_cq *cq, struct ibv_wc *tmp, struct rg_wc *o, int n) {
	int got = ibv_poll_cq(cq, n, tmp);
	for (int i = 0; i < got; i++) {
		o[i].wr_id = tmp[i].wr_id; o[i].status = tmp[i].status; o[i].opcode = tmp[i].opcode;
		o[i].vendor_err = tmp[i].vendor_err; o[i].byte_len = tmp[i].byte_len; o[i].qp_num = tmp[i].qp_num;
		o[i].src_qp = tmp[i].src_qp; o[i].wc_flags = tmp[i].wc_flags;
		memcpy(o[i].imm, &tmp[i].imm_data, 4);
	}
	return got;
}

static struct ibv_qp *rg_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct rg_cap *cap, int sig_all) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq; a.recv_cq = rcq; a.qp_type = IBV_QPT_RC; a.sq_sig_all = sig_all;
	a.cap.max_send_wr = cap->max_send_wr; a.cap.max_recv_wr = cap->max_recv_wr;
	a.cap.max_send_sge = cap->max_send_sge; a.cap.max_recv_sge = cap->max_recv_sge;
	a.cap.max_inline_data = cap->max_inline;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (qp) {
		cap->max_send_wr = a.cap.max_send_wr; cap->max_recv_wr = a.cap.max_recv_wr;
		cap->max_send_sge = a.cap.max_send_sge; cap->max_recv_sge = a.cap.max_recv_sge;
		cap->max_inline = a.cap.max_inline_data;
	}
	return qp;
}

static uint32_t rg_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

static int rg_destroy_qp(struct ibv_qp *qp) {
	int rc = ibv_destroy_qp(qp);
	if (rc) { errno = rc; return -1; }
	return 0;
}

static int rg_modify_qp(struct ibv_qp *qp, struct rg_qp_attr *s, int mask) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = s->state; a.qp_access_flags = s->access; a.pkey_index = s->pkey_index; a.port_num = s->port;
	a.path_mtu = s->path_mtu; a.dest_qp_num = s->dest_qpn; a.rq_psn = s->rq_psn; a.sq_psn = s->sq_psn;
	a.min_rnr_timer = s->min_rnr_timer; a.max_dest_rd_atomic = s->max_dest_rd_atomic;
	a.max_rd_atomic = s->max_rd_atomic; a.timeout = s->timeout; a.retry_cnt = s->retry_cnt; a.rnr_retry = s->rnr_retry;
	a.ah_attr.dlid = s->dlid; a.ah_attr.port_num = s->port; a.ah_attr.is_global = s->is_global;
	if (s->is_global) {
		memcpy(a.ah_attr.grh.dgid.raw, s->dgid, 16);
		a.ah_attr.grh.sgid_index = s->sgid_index; a.ah_attr.grh.hop_limit = s->hop_limit;
	}
	int rc = ibv_modify_qp(qp, &a, mask);
	if (rc) { errno = rc; return -1; }
	return 0;
}

static int rg_qp_state(struct ibv_qp *qp) {
	struct ibv_qp_attr a; struct ibv_qp_init_attr i;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &i);
	if (rc) { errno = rc; return -1; }
	return a.qp_state;
}

// Build the chain in wrs from n flat descriptors and post it with one call.
// Returns the number posted; on failure errno says why the next one was not.
static int rg_post_send(struct ibv_qp *qp, struct rg_send *d, struct ibv_sge *sge, struct ibv_send_wr *wrs, int n) {
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		memset(w, 0, sizeof *w);
		w->wr_id = d[i].wr_id; w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = d[i].num_sge ? &sge[d[i].sge_off] : NULL; w->num_sge = d[i].num_sge;
		w->opcode = d[i].opcode; w->send_flags = d[i].flags;
		memcpy(&w->imm_data, d[i].imm, 4);
		if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = d[i].remote_addr; w->wr.atomic.rkey = d[i].rkey;
			w->wr.atomic.compare_add = d[i].compare_add; w->wr.atomic.swap = d[i].swap;
		} else {
			w->wr.rdma.remote_addr = d[i].remote_addr; w->wr.rdma.rkey = d[i].rkey;
		}
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wrs, &bad);
	if (!rc) return n;
	errno = rc;
	return bad ? (int)(bad - wrs) : 0;
}

static int rg_post_recv(struct ibv_qp *qp, struct rg_recv *d, struct ibv_sge *sge, struct ibv_recv_wr *wrs, int n) {
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wrs[i];
		w->wr_id = d[i].wr_id; w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = d[i].num_sge ? &sge[d[i].sge_off] : NULL; w->num_sge = d[i].num_sge;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qp, wrs, &bad);
	if (!rc) return n;
	errno = rc;
	return bad ? (int)(bad - wrs) : 0;
}

static int rg_async_fd(struct ibv_context *c) { return c->async_fd; }

// Non-blocking: -1 with EAGAIN when no event is pending. The event is
// acknowledged at once; its type and element are copied out.
static int rg_get_async_event(struct ibv_context *c, int *type, uint32_t *qpn, void **cq, int *port) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(c, &ev)) return -1;
	*type = ev.event_type; *qpn = 0; *cq = NULL; *port = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR: *cq = ev.element.cq; break;
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR: case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG: case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qpn = ev.element.qp->qp_num; break;
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE: case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER: case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num; break;
	default: break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

static int rg_ret(int rc) { if (rc) { errno = rc; return -1; } return 0; }
*/
import "C"

import (
	"fmt"
	"strings"
	"syscall"
	"unsafe"
)

func init() {
	// The Go descriptor twins must match their C structs byte for byte.
	type pair struct{ goOff, cOff uintptr }
	var s sendDesc
	var r recvDesc
	var w wcDesc
	var a qpAttrDesc
	var g gidDesc
	var cs C.struct_rg_send
	var cr C.struct_rg_recv
	var cw C.struct_rg_wc
	var ca C.struct_rg_qp_attr
	var cg C.struct_rg_gid
	var cap capDesc
	var cc C.struct_rg_cap
	var d devAttr
	var cd C.struct_rg_dev
	var p portAttr
	var cp C.struct_rg_port
	var e sgeDesc
	var ce C.struct_ibv_sge
	checks := []pair{
		{unsafe.Sizeof(s), unsafe.Sizeof(cs)}, {unsafe.Offsetof(s.remoteAddr), unsafe.Offsetof(cs.remote_addr)},
		{unsafe.Offsetof(s.rkey), unsafe.Offsetof(cs.rkey)}, {unsafe.Offsetof(s.imm), unsafe.Offsetof(cs.imm)},
		{unsafe.Offsetof(s.flags), unsafe.Offsetof(cs.flags)},
		{unsafe.Sizeof(r), unsafe.Sizeof(cr)}, {unsafe.Offsetof(r.numSGE), unsafe.Offsetof(cr.num_sge)},
		{unsafe.Sizeof(w), unsafe.Sizeof(cw)}, {unsafe.Offsetof(w.wcFlags), unsafe.Offsetof(cw.wc_flags)},
		{unsafe.Offsetof(w.imm), unsafe.Offsetof(cw.imm)},
		{unsafe.Sizeof(a), unsafe.Sizeof(ca)}, {unsafe.Offsetof(a.dgid), unsafe.Offsetof(ca.dgid)},
		{unsafe.Offsetof(a.dlid), unsafe.Offsetof(ca.dlid)}, {unsafe.Offsetof(a.hopLimit), unsafe.Offsetof(ca.hop_limit)},
		{unsafe.Sizeof(g), unsafe.Sizeof(cg)}, {unsafe.Offsetof(g.typ), unsafe.Offsetof(cg._type)},
		{unsafe.Sizeof(cap), unsafe.Sizeof(cc)}, {unsafe.Offsetof(cap.maxInline), unsafe.Offsetof(cc.max_inline)},
		{unsafe.Sizeof(d), unsafe.Sizeof(cd)}, {unsafe.Offsetof(d.physPortCnt), unsafe.Offsetof(cd.phys_port_cnt)},
		{unsafe.Sizeof(p), unsafe.Sizeof(cp)}, {unsafe.Offsetof(p.activeSpeed), unsafe.Offsetof(cp.active_speed)},
		{unsafe.Sizeof(e), unsafe.Sizeof(ce)}, {unsafe.Offsetof(e.lkey), unsafe.Offsetof(ce.lkey)},
	}
	for i, c := range checks {
		if c.goOff != c.cOff {
			panic(fmt.Sprintf("ibv: descriptor layout check %d: Go %d, C %d", i, c.goOff, c.cOff))
		}
	}
	sizeofSendWR = int(unsafe.Sizeof(C.struct_ibv_send_wr{}))
	sizeofRecvWR = int(unsafe.Sizeof(C.struct_ibv_recv_wr{}))
	sizeofWC = int(unsafe.Sizeof(C.struct_ibv_wc{}))
}

var sizeofSendWR, sizeofRecvWR, sizeofWC int

func errnoOr(err error, def syscall.Errno) error {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return def
}

func cDeviceNames() ([]string, error) {
	buf := (*C.char)(C.calloc(1, 8192))
	defer C.free(unsafe.Pointer(buf))
	n, err := C.rg_device_names(buf, 8192)
	if n < 0 {
		return nil, errnoOr(err, syscall.ENODEV)
	}
	return strings.Fields(C.GoString(buf)), nil
}

func cOpen(name string) (unsafe.Pointer, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	c, err := C.rg_open(cs)
	if c == nil {
		return nil, errnoOr(err, syscall.ENODEV)
	}
	return unsafe.Pointer(c), nil
}

func cClose(ctx unsafe.Pointer) error {
	if rc, err := C.ibv_close_device((*C.struct_ibv_context)(ctx)); rc != 0 {
		return errnoOr(err, syscall.EIO)
	}
	return nil
}

func cQueryDevice(ctx unsafe.Pointer, d *devAttr) error {
	if rc, err := C.rg_query_device((*C.struct_ibv_context)(ctx), (*C.struct_rg_dev)(unsafe.Pointer(d))); rc != 0 {
		return errnoOr(err, syscall.EIO)
	}
	return nil
}

func cQueryPort(ctx unsafe.Pointer, port int, p *portAttr) error {
	if rc, err := C.rg_query_port((*C.struct_ibv_context)(ctx), C.int(port), (*C.struct_rg_port)(unsafe.Pointer(p))); rc != 0 {
		return errnoOr(err, syscall.EIO)
	}
	return nil
}

func cGIDTable(ctx unsafe.Pointer, port int, out []gidDesc) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	n, err := C.rg_gid_table((*C.struct_ibv_context)(ctx), C.int(port), (*C.struct_rg_gid)(unsafe.Pointer(&out[0])), C.int(len(out)))
	if n < 0 {
		return 0, errnoOr(err, syscall.EIO)
	}
	return int(n), nil
}

func cAllocPD(ctx unsafe.Pointer) (unsafe.Pointer, error) {
	pd, err := C.ibv_alloc_pd((*C.struct_ibv_context)(ctx))
	if pd == nil {
		return nil, errnoOr(err, syscall.ENOMEM)
	}
	return unsafe.Pointer(pd), nil
}

func cDeallocPD(pd unsafe.Pointer) error {
	if rc, err := C.rg_ret(C.ibv_dealloc_pd((*C.struct_ibv_pd)(pd))); rc != 0 {
		return errnoOr(err, syscall.EBUSY)
	}
	return nil
}

// cRegMR registers n bytes at addr, which is C memory or pinned Go memory.
func cRegMR(pd unsafe.Pointer, addr uintptr, n int, access uint32) (mr unsafe.Pointer, lkey, rkey uint32, err error) {
	var lk, rk C.uint32_t
	m, e := C.rg_reg_mr((*C.struct_ibv_pd)(pd), C.uintptr_t(addr), C.size_t(n), C.int(access), &lk, &rk)
	if m == nil {
		return nil, 0, 0, errnoOr(e, syscall.EINVAL)
	}
	return unsafe.Pointer(m), uint32(lk), uint32(rk), nil
}

func cDeregMR(mr unsafe.Pointer) error {
	if rc, err := C.rg_ret(C.ibv_dereg_mr((*C.struct_ibv_mr)(mr))); rc != 0 {
		return errnoOr(err, syscall.EINVAL)
	}
	return nil
}

func cCreateChannel(ctx unsafe.Pointer) (unsafe.Pointer, int, error) {
	ch, err := C.ibv_create_comp_channel((*C.struct_ibv_context)(ctx))
	if ch == nil {
		return nil, -1, errnoOr(err, syscall.ENOMEM)
	}
	return unsafe.Pointer(ch), int(C.rg_channel_fd(ch)), nil
}

func cDestroyChannel(ch unsafe.Pointer) error {
	if rc, err := C.rg_ret(C.ibv_destroy_comp_channel((*C.struct_ibv_comp_channel)(ch))); rc != 0 {
		return errnoOr(err, syscall.EBUSY)
	}
	return nil
}

func cCreateCQ(ctx unsafe.Pointer, depth int, ch unsafe.Pointer) (unsafe.Pointer, int, error) {
	var cq *C.struct_ibv_cq
	n, err := C.rg_create_cq((*C.struct_ibv_context)(ctx), C.int(depth), (*C.struct_ibv_comp_channel)(ch), &cq)
	if cq == nil {
		return nil, 0, errnoOr(err, syscall.ENOMEM)
	}
	return unsafe.Pointer(cq), int(n), nil
}

func cDestroyCQ(cq unsafe.Pointer) error {
	if rc, err := C.rg_ret(C.ibv_destroy_cq((*C.struct_ibv_cq)(cq))); rc != 0 {
		return errnoOr(err, syscall.EBUSY)
	}
	return nil
}

func cReqNotify(cq unsafe.Pointer) error {
	if rc, err := C.rg_req_notify((*C.struct_ibv_cq)(cq)); rc != 0 {
		return errnoOr(err, syscall.EIO)
	}
	return nil
}

// cGetCQEvent takes and acknowledges one event; false, nil when none is pending.
func cGetCQEvent(ch unsafe.Pointer) (bool, error) {
	if rc, err := C.rg_get_cq_event((*C.struct_ibv_comp_channel)(ch)); rc != 0 {
		if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
			return false, nil
		}
		return false, errnoOr(err, syscall.EIO)
	}
	return true, nil
}

// cPoll polls up to n completions; tmp holds n ibv_wc, out n wcDesc (both C memory).
func cPoll(cq, tmp unsafe.Pointer, out unsafe.Pointer, n int) int {
	got := C.rg_poll((*C.struct_ibv_cq)(cq), (*C.struct_ibv_wc)(tmp), (*C.struct_rg_wc)(out), C.int(n))
	return int(got)
}

func cCreateQP(pd, scq, rcq unsafe.Pointer, c *capDesc, sigAll bool) (unsafe.Pointer, uint32, error) {
	s := C.int(0)
	if sigAll {
		s = 1
	}
	qp, err := C.rg_create_qp((*C.struct_ibv_pd)(pd), (*C.struct_ibv_cq)(scq), (*C.struct_ibv_cq)(rcq),
		(*C.struct_rg_cap)(unsafe.Pointer(c)), s)
	if qp == nil {
		return nil, 0, errnoOr(err, syscall.EINVAL)
	}
	return unsafe.Pointer(qp), uint32(C.rg_qp_num(qp)), nil
}

func cDestroyQP(qp unsafe.Pointer) error {
	if rc, err := C.rg_destroy_qp((*C.struct_ibv_qp)(qp)); rc != 0 {
		return errnoOr(err, syscall.EBUSY)
	}
	return nil
}

func cModifyQP(qp unsafe.Pointer, a *qpAttrDesc, mask uint32) error {
	if rc, err := C.rg_modify_qp((*C.struct_ibv_qp)(qp), (*C.struct_rg_qp_attr)(unsafe.Pointer(a)), C.int(mask)); rc != 0 {
		return errnoOr(err, syscall.EINVAL)
	}
	return nil
}

func cQPState(qp unsafe.Pointer) (int, error) {
	st, err := C.rg_qp_state((*C.struct_ibv_qp)(qp))
	if st < 0 {
		return -1, errnoOr(err, syscall.EIO)
	}
	return int(st), nil
}

// cPostSend posts n descriptors as one chain; it returns how many were
// posted and, if not all, the errno for the first that was not.
func cPostSend(qp, desc, sges, wrs unsafe.Pointer, n int) (int, error) {
	k, err := C.rg_post_send((*C.struct_ibv_qp)(qp), (*C.struct_rg_send)(desc), (*C.struct_ibv_sge)(sges), (*C.struct_ibv_send_wr)(wrs), C.int(n))
	if int(k) == n {
		return n, nil
	}
	return int(k), errnoOr(err, syscall.EINVAL)
}

func cPostRecv(qp, desc, sges, wrs unsafe.Pointer, n int) (int, error) {
	k, err := C.rg_post_recv((*C.struct_ibv_qp)(qp), (*C.struct_rg_recv)(desc), (*C.struct_ibv_sge)(sges), (*C.struct_ibv_recv_wr)(wrs), C.int(n))
	if int(k) == n {
		return n, nil
	}
	return int(k), errnoOr(err, syscall.EINVAL)
}

// cAlloc returns n zeroed bytes of C memory (never nil for n > 0 unless out of memory).
func cAlloc(n int) unsafe.Pointer { return C.calloc(1, C.size_t(n)) }

func cFree(p unsafe.Pointer) { C.free(p) }

func cAsyncFD(ctx unsafe.Pointer) int { return int(C.rg_async_fd((*C.struct_ibv_context)(ctx))) }

// asyncEvent is one ibv_async_event, already acknowledged.
type asyncEvent struct {
	typ  int
	name string
	qpn  uint32
	cq   unsafe.Pointer
	port int
}

// cGetAsyncEvent takes one event; false, nil when none is pending.
func cGetAsyncEvent(ctx unsafe.Pointer) (asyncEvent, bool, error) {
	var typ, port C.int
	var qpn C.uint32_t
	var cq unsafe.Pointer
	if rc, err := C.rg_get_async_event((*C.struct_ibv_context)(ctx), &typ, &qpn, &cq, &port); rc != 0 {
		if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
			return asyncEvent{}, false, nil
		}
		return asyncEvent{}, false, errnoOr(err, syscall.EIO)
	}
	return asyncEvent{typ: int(typ), name: C.GoString(C.ibv_event_type_str(uint32(typ))), qpn: uint32(qpn), cq: cq, port: int(port)}, true, nil
}
