// Package open turns the node's --storage URL (plus the --s3-* flags) into
// an objstore.Store, so cmd and node code never import a backend directly:
//
//	file:///abs/path           the fs backend rooted at /abs/path
//	s3://bucket                the s3 backend, whole bucket
//	s3://bucket/some/prefix    the s3 backend, keys under some/prefix/
//
// It must never guess: relative paths, credentials embedded in the URL and
// unknown schemes are errors that say what to write instead.
package open
