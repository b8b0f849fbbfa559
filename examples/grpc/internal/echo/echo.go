package echo

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The full names of the service's methods. Both take and return a
// string, served by the one Handler (grpc.Method(ctx) tells them apart):
// Echo is idempotent, Store stands for a method that is not, for tests
// that must tell one kind from the other.
const (
	Method      = "/lbkit.example.Echo/Echo"
	StoreMethod = "/lbkit.example.Echo/Store"
)

// Handler serves one RPC: it gets the request's text and returns the reply
// or an error (a status error, for a code other than UNKNOWN).
type Handler func(ctx context.Context, msg string) (string, error)

// Register adds the service to s, served by h.
func Register(s *grpc.Server, h Handler) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "lbkit.example.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Echo", Handler: unary(h, Method)},
			{MethodName: "Store", Handler: unary(h, StoreMethod)},
		},
		Metadata: "echo",
	}, nil)
}

// unary returns the gRPC handler of method, served by h.
func unary(h Handler, method string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			out, err := h(ctx, req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		}
		if icpt == nil {
			return call(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, call)
	}
}

// Call sends msg to Echo and returns the reply.
func Call(ctx context.Context, cc grpc.ClientConnInterface, msg string, opts ...grpc.CallOption) (string, error) {
	return Invoke(ctx, cc, Method, msg, opts...)
}

// Invoke sends msg to method, Method or StoreMethod, and returns the
// reply.
func Invoke(ctx context.Context, cc grpc.ClientConnInterface, method, msg string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, method, wrapperspb.String(msg), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}
