package lrt

// WithScanMax sets the largest set the Balanced mode compares in full, for
// the tests and benchmarks that compare a scan with two choices.
func WithScanMax(n int) Option {
	return optionFunc(func(c *config) { c.scanMax = n })
}
