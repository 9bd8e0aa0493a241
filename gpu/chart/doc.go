// Command chart draws the GPU benchmark (docs/gpu-bench.json, one run of
// TestGPUBench in gpu/bench_test.go): each row's end-to-end rate (CPU
// workers, the CUDA backend through the engine, the kernel alone) as the
// median over the repeats with their min..max range, the targets
// as red marks.
//
//	go run ./gpu/chart -in docs/gpu-bench.json -out docs/gpu-bench.png
package main
