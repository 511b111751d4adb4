// Package api is the server API of a node (contract §5, §19): the JSON
// endpoints under /api/v1 and the same operations as the protobuf service
// wsgate.v1.APIService over gRPC, gRPC-Web and Connect.
//
// It owns the outside of the API, none of its work: the bodies and their
// decoding (one message, a batch of up to MaxBatch, each refused with its
// own 400 message), the answers and their encoding, the contract's error
// bodies (Error, with its HTTP status and code, and the gRPC code of that
// status). The operations themselves (publish, rooms, presence, history,
// nodes, connections) are the node's.
package api
