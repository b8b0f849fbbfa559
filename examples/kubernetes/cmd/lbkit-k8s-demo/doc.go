// Command lbkit-k8s-demo is a reverse proxy in front of a Kubernetes
// Service, fed by the Service's EndpointSlices: health around a locality
// Balancer around leastconn, a picker per zone, kept in step by
// lbkube.Watcher. It prints every sync, and when the first list of the
// slices does not come within 30 s, why (lbkube.Watcher.Start: a refused
// connection to the API server, a list RBAC forbids).
//
//	go run ./cmd/lbkit-k8s-demo -kubeconfig ~/.kube/config -namespace shop -service cart -port http -zone us-east-1a
//	curl http://127.0.0.1:8000/
//
// Flags:
//
//	-kubeconfig path    a kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)
//	-namespace name     the Service's namespace (default "default")
//	-service name       the Service (required)
//	-port name          the Service port's name (default: its only port)
//	-zone name          this proxy's zone, for zone-aware routing (default: none)
//	-listen addr        where to serve the proxy (default 127.0.0.1:8000)
//
// It needs a cluster it can list and watch EndpointSlices in (RBAC: get,
// list and watch on endpointslices.discovery.k8s.io in the namespace),
// and the pods' addresses must be reachable from where it runs (inside
// the cluster, or a routed pod network). It has not been run against a
// real cluster here: there is none on this machine; its test runs it
// against client-go's fake clientset and a loopback backend.
package main
