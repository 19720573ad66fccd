package provider

import (
	"bufio"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
)

// Hosted is implemented by providers whose nodes all run on one host (the
// local provider: child processes of the server's machine). Its capacity
// bounds the size of any one node: the server refuses a compute whose size
// the host cannot honour, unless the location allows oversubscription.
type Hosted interface {
	// HostCapacity is the host's vCPUs, memory and GPUs, as a Size.
	HostCapacity() api.Size
}

// ThisHost is this machine's capacity: its CPUs, its memory (MemTotal of
// /proc/meminfo; 0 where that cannot be read) and gpus devices.
func ThisHost(gpus int) api.Size {
	return api.Size{Name: "this host", VCPUs: goruntime.NumCPU(), MemoryGB: memTotalGB("/proc/meminfo"), GPUs: gpus}
}

// memTotalGB reads MemTotal (in kB) from a meminfo file, in GiB.
func memTotalGB(path string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return 0
			}
			return kb / (1 << 20)
		}
	}
	return 0
}
