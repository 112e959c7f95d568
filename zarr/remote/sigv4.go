package remote

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// AWS Signature Version 4 for S3's GET and HEAD requests, signed in their
// headers: the payload is not hashed (x-amz-content-sha256 says
// UNSIGNED-PAYLOAD), the query is empty, and the signed headers are host,
// range (when set), x-amz-content-sha256, x-amz-date and, with temporary
// credentials, x-amz-security-token. The canonical URI is the path as
// sent, its key escaped by escapeKey (S3 does not escape it again).
// Signing a request costs two small hashes and an HMAC, with the signing
// key derived once a day.

// unsignedPayload is the payload hash of every request: not computed.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// s3Signer signs the requests of every s3:// store of an Opener: an
// authorizer.
type s3Signer struct {
	creds  aws.CredentialsProvider // a cache: Retrieve is cheap, and refreshes what expires
	region string
	key    atomic.Pointer[signingKey]
	stamp  atomic.Pointer[amzStamp]
}

// signingKey is the key derived for one day, region and secret key, and
// its HMAC pads.
type signingKey struct {
	day, secret string
	ipad, opad  [sha256.BlockSize]byte // the key xor 0x36, xor 0x5c
}

// amzStamp is one second's x-amz-date: 20060102T150405Z.
type amzStamp struct {
	unix int64
	text string
}

func newS3Signer(creds aws.CredentialsProvider, region string) *s3Signer {
	return &s3Signer{creds: creds, region: region}
}

func (s *s3Signer) authorize(req *http.Request, path string) error {
	creds, err := s.creds.Retrieve(req.Context())
	if err != nil {
		return &tokenError{what: "AWS credentials", err: err}
	}
	s.sign(req, path, creds, time.Now())
	return nil
}

// sign adds the headers of a signature of req, whose escaped path is
// path, by creds at time t: X-Amz-Date, X-Amz-Content-Sha256,
// X-Amz-Security-Token when creds have a session token, Authorization.
// Header values are signed as they are: req's Host and Range have no
// spaces to trim.
func (s *s3Signer) sign(req *http.Request, path string, creds aws.Credentials, t time.Time) {
	date := s.date(t)
	day := date[:8]
	key := s.signingKey(day, creds.SecretAccessKey)
	var rng string
	if v := req.Header["Range"]; len(v) > 0 {
		rng = v[0]
	}
	token := creds.SessionToken
	signed := "host;x-amz-content-sha256;x-amz-date"
	switch {
	case rng != "" && token != "":
		signed = "host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token"
	case rng != "":
		signed = "host;range;x-amz-content-sha256;x-amz-date"
	case token != "":
		signed = "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
	}

	// The canonical request, hashed.
	var buf [1024]byte
	b := append(buf[:0], req.Method...)
	b = append(b, '\n')
	b = append(b, path...)
	b = append(b, "\n\nhost:"...)
	b = append(b, req.Host...)
	b = append(b, '\n')
	if rng != "" {
		b = append(b, "range:"...)
		b = append(b, rng...)
		b = append(b, '\n')
	}
	b = append(b, "x-amz-content-sha256:"+unsignedPayload+"\nx-amz-date:"...)
	b = append(b, date...)
	b = append(b, '\n')
	if token != "" {
		b = append(b, "x-amz-security-token:"...)
		b = append(b, token...)
		b = append(b, '\n')
	}
	b = append(b, '\n')
	b = append(b, signed...)
	b = append(b, "\n"+unsignedPayload...)
	crHash := sha256.Sum256(b)

	// The string to sign, after the HMAC's inner pad, then the HMAC.
	b = append(buf[:0], key.ipad[:]...)
	b = append(b, "AWS4-HMAC-SHA256\n"...)
	b = append(b, date...)
	b = append(b, '\n')
	b = appendScope(b, day, s.region)
	b = append(b, '\n')
	b = hex.AppendEncode(b, crHash[:])
	inner := sha256.Sum256(b)
	b = append(buf[:0], key.opad[:]...)
	b = append(b, inner[:]...)
	sig := sha256.Sum256(b)

	b = append(buf[:0], "AWS4-HMAC-SHA256 Credential="...)
	b = append(b, creds.AccessKeyID...)
	b = append(b, '/')
	b = appendScope(b, day, s.region)
	b = append(b, ", SignedHeaders="...)
	b = append(b, signed...)
	b = append(b, ", Signature="...)
	b = hex.AppendEncode(b, sig[:])

	v := make([]string, 4) // one allocation for every value
	v[0], v[1], v[2], v[3] = date, unsignedPayload, string(b), token
	h := req.Header
	h["X-Amz-Date"] = v[0:1:1]
	h["X-Amz-Content-Sha256"] = v[1:2:2]
	h["Authorization"] = v[2:3:3]
	if token != "" {
		h["X-Amz-Security-Token"] = v[3:4:4]
	}
}

// appendScope appends the credential scope: DAY/REGION/s3/aws4_request.
func appendScope(b []byte, day, region string) []byte {
	b = append(b, day...)
	b = append(b, '/')
	b = append(b, region...)
	return append(b, "/s3/aws4_request"...)
}

// date returns t's x-amz-date, made once a second.
func (s *s3Signer) date(t time.Time) string {
	t = t.UTC()
	sec := t.Unix()
	if st := s.stamp.Load(); st != nil && st.unix == sec {
		return st.text
	}
	var b [16]byte
	y, mo, d := t.Date()
	h, mi, se := t.Clock()
	put := func(i, v, n int) {
		for j := i + n - 1; j >= i; j-- {
			b[j] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, y, 4)
	put(4, int(mo), 2)
	put(6, d, 2)
	b[8] = 'T'
	put(9, h, 2)
	put(11, mi, 2)
	put(13, se, 2)
	b[15] = 'Z'
	st := &amzStamp{unix: sec, text: string(b[:])}
	s.stamp.Store(st)
	return st.text
}

// signingKey returns the signing key of day (YYYYMMDD) and secret,
// deriving it when the day or the secret changed.
func (s *s3Signer) signingKey(day, secret string) *signingKey {
	if k := s.key.Load(); k != nil && k.day == day && k.secret == secret {
		return k
	}
	mac := func(key []byte, data string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(data))
		return h.Sum(nil)
	}
	kb := mac(mac(mac(mac([]byte("AWS4"+secret), day), s.region), "s3"), "aws4_request")
	k := &signingKey{day: day, secret: secret}
	for i := range k.ipad {
		k.ipad[i], k.opad[i] = 0x36, 0x5c
	}
	for i, c := range kb {
		k.ipad[i] ^= c
		k.opad[i] ^= c
	}
	s.key.Store(k)
	return k
}
