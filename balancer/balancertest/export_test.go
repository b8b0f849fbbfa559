package balancertest

import "github.com/lbkit/lbkit/balancer"

// RunCheck runs the check of that name alone, for the kit's own tests.
func RunCheck(name string, newBalancer func() balancer.Balancer) error {
	for _, c := range checks {
		if c.name == name {
			return runCheck(c, newBalancer)
		}
	}
	panic("balancertest: no check named " + name)
}

// CheckNames lists the checks in the order Run reports them.
func CheckNames() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}
