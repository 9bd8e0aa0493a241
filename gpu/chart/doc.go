// Command chart draws the GPU benchmark (docs/gpu-bench.json, the runs of
// TestGPUBench in gpu/bench_test.go): throughput of the CUDA backend and
// of CPU workers per rule count, and the slot handshake latency per batch
// size, each as the median over the repeated runs with their min..max
// range, and the targets as red marks.
//
//	go run ./gpu/chart -in docs/gpu-bench.json -out docs/gpu-bench.png -latency docs/gpu-latency.png
package main
