package lbhttp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// DefaultStickyCookie is the name of the sticky cookie when
// StickyConfig.Name is empty.
const DefaultStickyCookie = "lbkit_sticky"

// MinStickyKey is the length, in bytes, of the shortest StickyConfig.Key
// NewProxy accepts: 128 bits.
const MinStickyKey = 16

// maxStickyID is the longest backend ID a sticky cookie carries; a
// backend with a longer one is never pinned.
const maxStickyID = 255

// stickyTag is the length of a cookie's HMAC-SHA256 tag, truncated: 128
// bits, as many as AES-SIV's (RFC 5297).
const stickyTag = 16

// maxStickyCache bounds the cookies a proxy remembers as verified and
// issued; past it, the memory starts afresh. Only cookies for backends
// the proxy has picked, or whose signature holds, enter it.
const maxStickyCache = 4096

// StickyConfig configures sticky sessions (Config.Sticky): NewProxy
// inserts a cookie naming the backend that answered a request, and sends
// the client's later requests there while that backend is eligible. Every
// field's zero value means the documented default.
type StickyConfig struct {
	// Name is the cookie's name, an RFC 9110 token. Empty:
	// DefaultStickyCookie.
	Name string
	// Key signs and seals the cookies, at least MinStickyKey bytes. Give
	// every proxy of a fleet the same Key, kept secret, for a session to
	// keep its backend whichever proxy takes the request and across
	// restarts. Nil: 32 random bytes drawn by NewProxy, so that the
	// cookies of this proxy process are valid in it only.
	Key []byte
	// MaxAge is the cookie's Max-Age, counted from when it was set: a
	// session is pinned that long at most, then picked afresh. It must
	// be whole seconds. Zero: a session cookie, which the browser drops
	// when it closes (HAProxy's cookie insert without maxlife).
	MaxAge time.Duration
	// Secure adds the Secure attribute, so that the browser sends the
	// cookie over HTTPS only. Set it when clients reach the proxy over
	// HTTPS (TLS ending in front of it or in it). False: no Secure.
	Secure bool
}

// stickyCodec makes and reads sticky cookies. A cookie's value is
// base64url(tag ‖ sealed), where tag is HMAC-SHA256(macKey, ID) truncated
// to 16 bytes and sealed is the ID encrypted with AES-CTR under encKey,
// the tag being the counter's start: the SIV construction (RFC 5297's,
// with HMAC for CMAC). The ID is not readable in the cookie, the cookie
// cannot be made for a backend without the key, and the same ID always
// gives the same value, so that verified values can be remembered.
//
// Immutable after newStickyCodec but for cache, which is copy-on-write:
// read with an atomic load, replaced under mu.
type stickyCodec struct {
	name   string
	macKey []byte
	block  cipher.Block
	attrs  http.Cookie // the template of every Set-Cookie, without Value

	mu    sync.Mutex
	cache atomic.Pointer[stickyCache]
}

// stickyCache is what the codec remembers; immutable once published.
type stickyCache struct {
	ids   map[string]string // a verified cookie value → its backend ID
	lines map[string]string // a backend ID → its Set-Cookie line
}

// newStickyCodec checks cfg and returns its codec, drawing a key when cfg
// has none.
func newStickyCodec(cfg StickyConfig) (*stickyCodec, error) {
	name := cfg.Name
	if name == "" {
		name = DefaultStickyCookie
	}
	switch {
	case !validToken(name):
		return nil, fmt.Errorf("lbhttp: %w: Sticky.Name %q is not a cookie name", balancer.ErrBadOption, name)
	case cfg.Key != nil && len(cfg.Key) < MinStickyKey:
		return nil, fmt.Errorf("lbhttp: %w: Sticky.Key is %d bytes, want at least %d", balancer.ErrBadOption, len(cfg.Key), MinStickyKey)
	case cfg.MaxAge < 0 || cfg.MaxAge%time.Second != 0:
		return nil, fmt.Errorf("lbhttp: %w: Sticky.MaxAge %v is not a whole number of seconds from 0", balancer.ErrBadOption, cfg.MaxAge)
	}
	key := cfg.Key
	if key == nil {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // never fails (crypto/rand's doc)
	}
	// Two keys from one, for the tag and the encryption.
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("lbkit sticky cookie enc"))
	if err != nil {
		return nil, fmt.Errorf("lbhttp: sticky cookie cipher: %w", err)
	}
	c := &stickyCodec{
		name:   name,
		macKey: derive("lbkit sticky cookie mac"),
		block:  block,
		attrs: http.Cookie{Name: name, Path: "/", MaxAge: int(cfg.MaxAge / time.Second),
			HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: cfg.Secure},
	}
	c.cache.Store(&stickyCache{ids: map[string]string{}, lines: map[string]string{}})
	return c, nil
}

// tag returns the truncated HMAC-SHA256 of id.
func (c *stickyCodec) tag(id string) []byte {
	m := hmac.New(sha256.New, c.macKey)
	m.Write([]byte(id))
	return m.Sum(nil)[:stickyTag]
}

// seal returns the cookie value naming id.
func (c *stickyCodec) seal(id string) string {
	buf := make([]byte, stickyTag+len(id))
	copy(buf, c.tag(id))
	cipher.NewCTR(c.block, buf[:stickyTag]).XORKeyStream(buf[stickyTag:], []byte(id))
	return base64.RawURLEncoding.EncodeToString(buf)
}

// open returns the backend ID value names, or "" when value is not a
// cookie this codec's key made: malformed, tampered with, or forged. The
// tags are compared in constant time.
func (c *stickyCodec) open(value string) string {
	if base64.RawURLEncoding.DecodedLen(len(value)) > stickyTag+maxStickyID {
		return ""
	}
	buf, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(buf) <= stickyTag {
		return ""
	}
	id := make([]byte, len(buf)-stickyTag)
	cipher.NewCTR(c.block, buf[:stickyTag]).XORKeyStream(id, buf[stickyTag:])
	if !hmac.Equal(buf[:stickyTag], c.tag(string(id))) {
		return ""
	}
	return string(id)
}

// verify returns the backend ID a client's cookie value names, or "" for
// a value this codec did not make. A value verified before is a map read
// away, without allocation; a new one is opened, and remembered if it
// holds.
func (c *stickyCodec) verify(value string) string {
	if id, ok := c.cache.Load().ids[value]; ok {
		return id
	}
	id := c.open(value)
	if id != "" {
		c.remember(id, value)
	}
	return id
}

// setCookie returns the Set-Cookie line that pins a session to id: a map
// read for an ID seen before, made and remembered otherwise.
func (c *stickyCodec) setCookie(id string) string {
	if line, ok := c.cache.Load().lines[id]; ok {
		return line
	}
	line, _ := c.remember(id, "")
	return line
}

// remember adds id's cookie to the cache, value being its cookie value
// when the caller has it, and returns id's Set-Cookie line; an ID too long
// for a cookie (or with a character a cookie value cannot carry) gets an
// empty line, which is added as no cookie.
func (c *stickyCodec) remember(id, value string) (string, bool) {
	if len(id) > maxStickyID {
		return "", false
	}
	if value == "" {
		value = c.seal(id)
	}
	ck := c.attrs
	ck.Value = value
	line := ck.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cache.Load()
	next := &stickyCache{ids: make(map[string]string, len(old.ids)+1), lines: make(map[string]string, len(old.lines)+1)}
	if len(old.ids)+len(old.lines) < maxStickyCache {
		for k, v := range old.ids {
			next.ids[k] = v
		}
		for k, v := range old.lines {
			next.lines[k] = v
		}
	}
	next.ids[value] = id
	next.lines[id] = line
	c.cache.Store(next)
	return line, true
}

// stripCookie removes the cookies named name from h's Cookie lines,
// dropping lines left empty. It allocates only to rewrite a line that
// holds other cookies too.
func stripCookie(h http.Header, name string) {
	lines := h["Cookie"]
	if !slices.ContainsFunc(lines, func(line string) bool { return hasCookie(line, name) }) {
		return
	}
	out := lines[:0] // h is the outgoing request's own copy
	for _, line := range lines {
		if !hasCookie(line, name) {
			out = append(out, line)
			continue
		}
		var b strings.Builder
		for part := range strings.SplitSeq(line, ";") {
			part = strings.TrimSpace(part)
			if k, _, _ := strings.Cut(part, "="); k == name || part == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.WriteString(part)
		}
		if b.Len() > 0 {
			out = append(out, b.String())
		}
	}
	if len(out) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = out
}

// hasCookie reports whether a Cookie line holds a cookie named name.
func hasCookie(line, name string) bool {
	for line != "" {
		var part string
		part, line, _ = strings.Cut(line, ";")
		if k, _, _ := strings.Cut(strings.TrimSpace(part), "="); k == name {
			return true
		}
	}
	return false
}
