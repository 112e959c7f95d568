package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// uploadWorkers is how many objects Upload sends at once (at most
// Options.Concurrency).
const uploadWorkers = 16

// Upload copies the regular files below the local directory dir to the
// s3:// URI dst, one PUT per file, up to 16 at once, each file's key being
// dst's path joined with the file's path relative to dir; existing objects
// are replaced. The files named by last (paths relative to dir) are sent
// after every other file has been, so that their presence tells that the
// rest is complete. Failed PUTs are retried as reads are. Only s3:// can
// be written.
func (o *Opener) Upload(ctx context.Context, dir, dst string, last ...string) error {
	u, err := url.Parse(dst)
	if err != nil || !strings.EqualFold(u.Scheme, "s3") || u.Host == "" {
		return fmt.Errorf("remote: upload to %s: only s3://bucket/path can be written", Redact(dst))
	}
	late := map[string]bool{}
	for _, l := range last {
		late[filepath.Join(dir, l)] = true
	}
	var files, after []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if late[p] {
				after = append(after, p)
			} else {
				files = append(files, p)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remote: upload: %w", err)
	}
	o.mu.Lock()
	be, err := o.newS3Backend(ctx, u.Host)
	o.mu.Unlock()
	if err != nil {
		return err
	}
	b := be.(*s3Backend)
	prefix := strings.Trim(u.Path, "/")
	if err := o.putAll(ctx, b, dir, prefix, files); err != nil {
		return err
	}
	return o.putAll(ctx, b, dir, prefix, after)
}

// putAll sends files (below dir) to the keys below prefix, up to
// uploadWorkers at once; the first failure stops the rest.
func (o *Opener) putAll(ctx context.Context, b *s3Backend, dir, prefix string, files []string) error {
	jobs := make(chan string)
	errs := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range min(uploadWorkers, o.opts.Concurrency, max(len(files), 1)) {
		wg.Go(func() {
			for p := range jobs {
				rel, _ := filepath.Rel(dir, p)
				if err := o.put(ctx, b, path.Join(prefix, filepath.ToSlash(rel)), p); err != nil {
					select {
					case errs <- err:
					default:
					}
					cancel()
				}
			}
		})
	}
feed:
	for _, p := range files {
		select {
		case jobs <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return ctx.Err()
}

// put sends one file, retrying as reads do.
func (o *Opener) put(ctx context.Context, b *s3Backend, key, file string) error {
	fail := func(status int, code string, err error, attempts int) error {
		return &Error{Method: "PUT", URI: b.uri(key), Status: status, Code: code, Err: err, Attempts: attempts}
	}
	for attempt := 1; ; attempt++ {
		a := o.newAttempt(ctx)
		err := o.putOnce(a.ctx, b, key, file)
		a.stop()
		if err == nil {
			return nil
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("remote: upload: %w", err)
		}
		retry := ctx.Err() == nil
		status, code := 0, ""
		if r, ferr := b.failure(err); ferr == nil {
			status, code = r.status, r.code
			retry = retry && retryableStatus(r.status, r.code)
			if r.msg != "" {
				err = errors.New(r.msg)
			}
		} else if retry {
			err, retry = describe(b.server(), o.opts, a, err)
		}
		if !retry || attempt >= o.opts.Attempts {
			return fail(status, code, err, attempt)
		}
		if werr := sleep(ctx, o.backoff(attempt)); werr != nil {
			return fail(0, "", werr, attempt)
		}
	}
}

func (o *Opener) putOnce(ctx context.Context, b *s3Backend, key, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	n := fi.Size()
	_, err = b.c.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &b.name, Key: &key, Body: f, ContentLength: &n})
	return err
}
