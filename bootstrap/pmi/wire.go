package pmi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The two PMI wire formats.
//
// PMI-1 ("simple" PMI, MPICH's src/pmi/simple): one message per line, a
// space-separated list of key=value pairs ending in '\n', the command
// first by convention ("cmd=get_result rc=0 msg=success value=v1").
// Values cannot contain spaces or newlines; servers differ in key order
// and in whether rc is present (Hydra puts rc last, Slurm's pmi2 plugin
// first, and neither sends it in every reply), so a reply is a map.
//
// PMI-2: after an init line in PMI-1 style, every message is a 6-byte,
// left-aligned decimal length ("%-6d") followed by that many bytes of
// "key=value;" pairs with no newline. A literal ';' in a value is written
// ";;". rdmago never sends either separator in a value: keys are plain
// and values are base64 (see Client).

// maxMsg bounds one message: far above what any server sends (values are
// at most a few KiB), so that garbage cannot make a client buffer forever.
const maxMsg = 64 << 10

// errMalformed is the cause of every parse failure.
var errMalformed = errors.New("malformed PMI message")

// msg is one parsed message: its command and its other fields.
type msg struct {
	cmd    string
	fields map[string]string
}

func (m msg) get(k string) (string, bool) {
	v, ok := m.fields[k]
	return v, ok
}

// rc returns the message's rc field: 0 when absent (Hydra omits it in
// replies that cannot fail), and false when present but not a number.
func (m msg) rc() (int, bool) {
	v, ok := m.fields["rc"]
	if !ok {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

func (m msg) String() string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(m.cmd)
	for k, v := range m.fields {
		b.WriteString(" ")
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(v)
	}
	return b.String()
}

// parse1 parses one PMI-1 line (without its '\n'). Tokens are separated
// by one or more spaces; each is key=value, split at the first '='; the
// value may be empty. The line must have a cmd (the first token for the
// PMI_PORT handshake's "cmd=set size=3" as for everything else, but any
// position is accepted) and no key twice.
func parse1(line string) (msg, error) {
	m := msg{fields: map[string]string{}}
	if len(line) > maxMsg {
		return m, fmt.Errorf("%w: line of %d bytes", errMalformed, len(line))
	}
	line = strings.TrimSuffix(line, "\r")
	for tok := range strings.FieldsSeq(line) {
		k, v, ok := strings.Cut(tok, "=")
		if !ok || k == "" {
			return m, fmt.Errorf("%w: token %q is not key=value in %q", errMalformed, clip(tok), clip(line))
		}
		if _, dup := m.fields[k]; dup || (k == "cmd" && m.cmd != "") {
			return m, fmt.Errorf("%w: key %q twice in %q", errMalformed, k, clip(line))
		}
		if k == "cmd" {
			m.cmd = v
			continue
		}
		m.fields[k] = v
	}
	if m.cmd == "" {
		return m, fmt.Errorf("%w: no cmd in %q", errMalformed, clip(line))
	}
	return m, nil
}

// parse2 parses one PMI-2 payload (without its length prefix):
// "cmd=kvs-get-response;rc=0;found=TRUE;value=v1;". ";;" inside a value
// stands for ';'. The trailing ';' is optional.
func parse2(p string) (msg, error) {
	m := msg{fields: map[string]string{}}
	if len(p) > maxMsg {
		return m, fmt.Errorf("%w: message of %d bytes", errMalformed, len(p))
	}
	for len(p) > 0 {
		eq := strings.IndexByte(p, '=')
		if eq <= 0 {
			return m, fmt.Errorf("%w: field %q is not key=value", errMalformed, clip(p))
		}
		k := p[:eq]
		if strings.IndexByte(k, ';') >= 0 {
			return m, fmt.Errorf("%w: field %q is not key=value", errMalformed, clip(k))
		}
		p = p[eq+1:]
		var v strings.Builder
		for {
			i := strings.IndexByte(p, ';')
			if i < 0 {
				v.WriteString(p)
				p = ""
				break
			}
			v.WriteString(p[:i])
			if i+1 < len(p) && p[i+1] == ';' {
				v.WriteByte(';')
				p = p[i+2:]
				continue
			}
			p = p[i+1:]
			break
		}
		if _, dup := m.fields[k]; dup || (k == "cmd" && m.cmd != "") {
			return m, fmt.Errorf("%w: key %q twice", errMalformed, k)
		}
		if k == "cmd" {
			m.cmd = v.String()
			continue
		}
		m.fields[k] = v.String()
	}
	if m.cmd == "" {
		return m, fmt.Errorf("%w: no cmd", errMalformed)
	}
	return m, nil
}

// format1 writes a PMI-1 request line. Values must not contain spaces or
// newlines (callers only pass plain tokens).
func format1(cmd string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(cmd)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(" ")
		b.WriteString(kv[i])
		b.WriteString("=")
		b.WriteString(kv[i+1])
	}
	b.WriteString("\n")
	return b.String()
}

// format2 writes a PMI-2 message with its length prefix. ';' in values is
// doubled.
func format2(cmd string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(strings.ReplaceAll(cmd, ";", ";;"))
	b.WriteString(";")
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i])
		b.WriteString("=")
		b.WriteString(strings.ReplaceAll(kv[i+1], ";", ";;"))
		b.WriteString(";")
	}
	return fmt.Sprintf("%-6d%s", b.Len(), b.String())
}

// frame2 finds one complete PMI-2 message at the start of buf: its payload
// and the bytes it takes. ok is false when more bytes are needed.
func frame2(buf []byte) (payload string, n int, ok bool, err error) {
	if len(buf) < 6 {
		return "", 0, false, nil
	}
	l, err := strconv.Atoi(strings.TrimSpace(string(buf[:6]))) // Slurm pads on the right, Hydra on the left
	if err != nil || l < 0 || l > maxMsg {
		return "", 0, false, fmt.Errorf("%w: length prefix %q", errMalformed, clip(string(buf[:6])))
	}
	if len(buf) < 6+l {
		return "", 0, false, nil
	}
	return string(buf[6 : 6+l]), 6 + l, true, nil
}

// clip shortens what goes into an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
