package main

import (
	"context"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

// uriHelp is the paragraph the commands that read stores add to their
// help.
const uriHelp = `PATH may be a local path, a file:// URI, or an object store's URI:
s3://bucket/prefix (AWS credentials as the AWS CLI finds them; a custom
endpoint such as MinIO from DAMACY_S3_ENDPOINT or AWS_ENDPOINT_URL,
path-style; unsigned with DAMACY_S3_ANONYMOUS=1 or when no credentials
are found), gs://bucket/prefix (application default credentials, or
anonymous), or http(s)://host/path (ranged GETs).`

// openURI resolves a path or URI to a store and the node's path within
// it, through an Opener configured from the environment; done releases
// the Opener's connections once the store is no longer read.
func openURI(ctx context.Context, uri string) (st zarr.Store, path string, done func(), err error) {
	o, err := remote.NewOpener(remote.Options{})
	if err != nil {
		return nil, "", nil, err
	}
	st, path, err = o.Open(ctx, uri)
	if err != nil {
		o.Close()
		return nil, "", nil, err
	}
	return st, path, func() { o.Close() }, nil
}
