package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    ByteSize
		wantErr bool
	}{
		{"1024", 1024, false},
		{"512M", 512 << 20, false},
		{"2G", 2 << 30, false},
		{"300MB", 300 << 20, false},
		{"1GiB", 1 << 30, false},
		{" 4 k ", 4 << 10, false},
		{"10B", 10, false},
		{"", 0, true},
		{"-1", 0, true},
		{"1.5G", 0, true},
		{"lots", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseByteSize(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseByteSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
	if s := ByteSize(3 << 30).String(); s != "3G" {
		t.Fatalf("String = %q", s)
	}
}

func TestMaxDataSizeFromFileAndEnv(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tide.yml")
	if err := os.WriteFile(f, []byte("max_data_size: 64M\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(f)
	if err != nil || c.MaxDataSize != 64<<20 {
		t.Fatalf("file: %v, %v", c.MaxDataSize, err)
	}
	t.Setenv("TIDE_MAX_DATA_SIZE", "2M")
	if c, err = Load(f); err != nil || c.MaxDataSize != 2<<20 {
		t.Fatalf("env: %v, %v", c.MaxDataSize, err)
	}
	t.Setenv("TIDE_MAX_DATA_SIZE", "huge")
	if _, err = Load(f); err == nil || !strings.Contains(err.Error(), "TIDE_MAX_DATA_SIZE") {
		t.Fatalf("bad env: %v", err)
	}
	t.Setenv("TIDE_MAX_DATA_SIZE", "")
	if c, err = Load(""); err != nil || c.MaxDataSize != DefaultMaxDataSize {
		t.Fatalf("default: %v, %v", c.MaxDataSize, err)
	}
}
