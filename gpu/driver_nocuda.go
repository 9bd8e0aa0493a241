//go:build nocuda

package gpu

// loadDriver in a binary built with -tags nocuda: no purego, so the binary
// stays static (see driver_load.go), and the CUDA backend is unavailable
// with a reason that says why.
func loadDriver() (*driver, error) {
	return nil, unavailable("this binary was built without the CUDA backend (-tags nocuda, as the static OCI image is): use a build without that tag on a machine with an NVIDIA driver")
}
