package hostinfo

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD  EPYC\nflags\t\t: fpu vme hypervisor lahf_lm\n\nprocessor\t: 1\nmodel name\t: AMD EPYC\n", "AMD EPYC, 2 CPUs (virtual machine)"},
		{"processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse2\n", "Intel(R) Xeon(R) Processor, 2 CPUs"},
		{"processor\t: 0\nBogoMIPS\t: 50.00\n", "arm64, 2 CPUs"},
		{"", "arm64, 2 CPUs"},
	} {
		if got := parse([]byte(c.in), "arm64", 2); got != c.want {
			t.Errorf("parse(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
