package api

import "time"

// JobUsage is what a job's processes on one node used, as its agent
// measured it: CPU time, memory (resident), GPU and the job folder's disk.
type JobUsage struct {
	// CPUSeconds is the user and system CPU time of the job's processes
	// (those that ended included), in seconds.
	CPUSeconds float64 `json:"cpu_seconds"`
	// MemoryBytes is the resident memory now; PeakMemoryBytes the most
	// seen at any sample.
	MemoryBytes     int64 `json:"memory_bytes"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// GPUPercent is the mean utilisation of the node's GPUs over the
	// samples taken while the job ran; nil where no GPU was measured.
	GPUPercent *float64 `json:"gpu_percent,omitempty"`
	// GPUMemoryBytes is the most GPU memory seen in use.
	GPUMemoryBytes int64 `json:"gpu_memory_bytes,omitempty"`
	// DiskBytes is the size of the job's folder on the node.
	DiskBytes int64 `json:"disk_bytes"`
	// Samples counts the measurements.
	Samples int `json:"samples"`
	// Note says what could not be measured (a container's processes).
	Note string `json:"note,omitempty"`
}

// NodeUtilization is what a node used at its last heartbeat.
type NodeUtilization struct {
	// CPUPercent is the CPU the agent and its jobs used since the previous
	// heartbeat, in percent of one core.
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryBytes is their resident memory.
	MemoryBytes int64 `json:"memory_bytes"`
	// GPUPercent and GPUMemoryBytes are the node's GPUs' utilisation and
	// memory in use (nvidia-smi); nil where none was measured.
	GPUPercent     *float64 `json:"gpu_percent,omitempty"`
	GPUMemoryBytes int64    `json:"gpu_memory_bytes,omitempty"`
}

// ComputeSample is a compute at one moment, kept for charts: its nodes by
// state, its queued and running jobs, and what its nodes used.
type ComputeSample struct {
	Time    time.Time       `json:"time"`
	Nodes   NodeStateCounts `json:"nodes"`
	Queued  int             `json:"queued"`
	Running int             `json:"running"`
	// CPUPercent adds up the nodes' CPU (percent of one core);
	// MemoryBytes their memory; GPUPercent is their GPUs' mean.
	CPUPercent  float64  `json:"cpu_percent"`
	MemoryBytes int64    `json:"memory_bytes"`
	GPUPercent  *float64 `json:"gpu_percent,omitempty"`
}

// NodeCache is a node's cache of downloaded inputs, as its agent last
// reported it: counters since the agent started, size now.
type NodeCache struct {
	// Hits are inputs found in the cache, Misses inputs downloaded into it,
	// Evictions entries deleted to stay within the limit.
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Evictions int64 `json:"evictions"`
	// Entries and Bytes are what the cache holds; LimitBytes its bound.
	Entries    int   `json:"entries"`
	Bytes      int64 `json:"bytes"`
	LimitBytes int64 `json:"limit_bytes"`
}
