package remote

import (
	"regexp"
	"strings"
)

// Mask replaces each secret Redact removes.
const Mask = "***"

// urlStart finds where a URL begins in text: a scheme and "://".
var urlStart = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://`)

// Redact returns s with the secrets of every URL in it masked: the
// password of the user info (user:***@host) and the value of each query
// and fragment parameter (?X-Amz-Signature=***&token=***), names kept. A
// presigned URL's signature, credential and session token, or a token in
// a query, are credentials: every error, log line and trace this module
// writes passes through Redact, and callers that print URIs themselves
// should too. s may be a URI or any text holding URIs ("GET https://...:
// connection refused"); a URL ends at white space, a quote or an angle
// bracket, and a value also at "&", "#" or "[" (a box after a sample's
// URI) and before trailing ":", ",", ".", ";" or ")" that the text puts
// after the URL. Redact is idempotent.
func Redact(s string) string {
	locs := urlStart.FindAllStringIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, loc := range locs {
		if loc[0] < last {
			continue // inside a URL already written (a URL in a query value)
		}
		end := loc[1] + strings.IndexFunc(s[loc[1]:], urlEnd)
		if end < loc[1] {
			end = len(s)
		}
		b.WriteString(s[last:loc[0]])
		b.WriteString(s[loc[0]:loc[1]])
		redactRest(&b, s[loc[1]:end])
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

// urlEnd reports whether r ends a URL in text.
func urlEnd(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}

// redactRest writes u, a URL after its "scheme://", with its password
// and parameter values masked.
func redactRest(b *strings.Builder, u string) {
	authEnd := strings.IndexAny(u, "/?#")
	if authEnd < 0 {
		authEnd = len(u)
	}
	auth := u[:authEnd]
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		if colon := strings.IndexByte(auth[:at], ':'); colon >= 0 {
			b.WriteString(auth[:colon+1])
			b.WriteString(Mask)
			auth = auth[at:]
		}
	}
	b.WriteString(auth)
	rest := u[authEnd:]
	q := strings.IndexAny(rest, "?#")
	if q < 0 {
		b.WriteString(rest)
		return
	}
	b.WriteString(rest[:q+1])
	rest = rest[q+1:]
	// Parameters: name=value, separated by "&" (or by "#" before a
	// fragment's own), up to a "[" that starts text after the URL.
	for rest != "" {
		stop := strings.IndexAny(rest, "&#[")
		param, sep := rest, ""
		if stop >= 0 {
			param, sep = rest[:stop], rest[stop:stop+1]
		}
		name, value, hasValue := strings.Cut(param, "=")
		b.WriteString(name)
		if hasValue {
			b.WriteByte('=')
			if stop < 0 {
				// The URL's last value: keep the punctuation of the text
				// that follows it ("URL: cause", "(URL)").
				trimmed := strings.TrimRight(value, ":,.;)")
				if trimmed != "" {
					b.WriteString(Mask)
				}
				b.WriteString(value[len(trimmed):])
			} else if value != "" {
				b.WriteString(Mask)
			}
		}
		if stop < 0 {
			return
		}
		if sep == "[" {
			b.WriteString(rest[stop:])
			return
		}
		b.WriteString(sep)
		rest = rest[stop+1:]
	}
}
