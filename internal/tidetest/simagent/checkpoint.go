package simagent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"path"
)

// PackCheckpoint makes a checkpoint archive as the real agent packs a job's
// checkpoint folder (TIDE_CHECKPOINT_DIR): a tar.gz holding the folder under
// the job's name, with files in it.
func PackCheckpoint(job string, files map[string][]byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: job + "/", Mode: 0o755})
	for name, b := range files {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Join(job, name), Mode: 0o644, Size: int64(len(b))})
		_, _ = tw.Write(b)
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

// UnpackCheckpoint returns the files of a checkpoint archive's folder, by
// name within it (nil archive: none).
func UnpackCheckpoint(archive []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	if archive == nil {
		return files, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[path.Base(h.Name)] = b
	}
}
