// go_reflection: a gRPC server reflection client written with what others wrote:
// grpc-go's generated ServerReflection client (google.golang.org/grpc/reflection/
// grpc_reflection_v1alpha, Debian's golang-google-grpc-dev) and the protobuf runtime's
// protodesc, which builds real descriptors from what the server sends and refuses a
// file whose imports are missing or inconsistent.
//
//	go_reflection ADDR [TOKEN]
//
// Lists the services (v1alpha, and v1 over the same messages, which are the same on the
// wire), describes worker.v1.WorkerService from the file that holds it and that file's
// imports, and prints one JSON object. Exit 1 on any error (printed on stderr).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

type method struct {
	Name            string `json:"name"`
	Input           string `json:"input"`
	Output          string `json:"output"`
	ClientStreaming bool   `json:"client_streaming"`
	ServerStreaming bool   `json:"server_streaming"`
}

type report struct {
	Services   []string          `json:"services"`
	V1Services []string          `json:"v1_services"`
	File       string            `json:"file"`
	Files      []string          `json:"files"`
	Methods    []method          `json:"methods"`
	Fields     map[string]string `json:"submit_request_fields"`
	NotFound   string            `json:"not_found"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "go_reflection: "+format+"\n", args...)
	os.Exit(1)
}

// ask sends one request on the stream and returns the response.
func ask(s grpc.ClientStream, req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
	if err := s.SendMsg(req); err != nil {
		if err == io.EOF { // the server ended the stream: its status says why
			err = s.RecvMsg(new(rpb.ServerReflectionResponse))
		}
		fail("send: %v", err)
	}
	resp := new(rpb.ServerReflectionResponse)
	if err := s.RecvMsg(resp); err != nil {
		fail("receive: %v", err)
	}
	return resp
}

func listServices(s grpc.ClientStream) []string {
	resp := ask(s, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_ListServices{ListServices: "*"}})
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if len(names) == 0 {
		fail("ListServices answered no service: %v", resp)
	}
	return names
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: go_reflection ADDR [TOKEN]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(os.Args) > 2 {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+os.Args[2])
	}
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fail("dial %s: %v", os.Args[1], err)
	}
	defer conn.Close()

	var out report
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		fail("ServerReflectionInfo: %v", err)
	}
	out.Services = listServices(stream)

	// The file holding the service, then its imports as the server sent them.
	resp := ask(stream, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: "worker.v1.WorkerService"}})
	if e := resp.GetErrorResponse(); e != nil {
		fail("FileContainingSymbol: error %d %s", e.GetErrorCode(), e.GetErrorMessage())
	}
	set := new(descriptorpb.FileDescriptorSet)
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(raw, fd); err != nil {
			fail("a FileDescriptorProto does not decode: %v", err)
		}
		set.File = append(set.File, fd)
		out.Files = append(out.Files, fd.GetName())
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		fail("protodesc refused the descriptors: %v", err)
	}
	d, err := files.FindDescriptorByName("worker.v1.WorkerService")
	if err != nil {
		fail("worker.v1.WorkerService is not in what was sent: %v", err)
	}
	svc, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		fail("worker.v1.WorkerService is a %T", d)
	}
	out.File = svc.ParentFile().Path()
	for i := 0; i < svc.Methods().Len(); i++ {
		m := svc.Methods().Get(i)
		out.Methods = append(out.Methods, method{
			Name: string(m.Name()), Input: string(m.Input().FullName()),
			Output: string(m.Output().FullName()), ClientStreaming: m.IsStreamingClient(),
			ServerStreaming: m.IsStreamingServer()})
	}
	md, err := files.FindDescriptorByName("worker.v1.SubmitTaskRequest")
	if err != nil {
		fail("worker.v1.SubmitTaskRequest: %v", err)
	}
	out.Fields = map[string]string{}
	fields := md.(protoreflect.MessageDescriptor).Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		out.Fields[string(f.Name())] = f.Kind().String()
	}
	resp = ask(stream, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: "no.such.Service"}})
	if e := resp.GetErrorResponse(); e != nil {
		out.NotFound = fmt.Sprintf("%d", e.GetErrorCode())
	}
	if err := stream.CloseSend(); err != nil {
		fail("close: %v", err)
	}
	if err := stream.RecvMsg(new(rpb.ServerReflectionResponse)); err == nil {
		fail("the stream did not end after the client's half-close")
	}

	// grpc.reflection.v1: the same messages under the v1 method.
	desc := &grpc.StreamDesc{StreamName: "ServerReflectionInfo", ServerStreams: true,
		ClientStreams: true}
	v1, err := conn.NewStream(ctx, desc, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
	if err != nil {
		fail("v1 ServerReflectionInfo: %v", err)
	}
	out.V1Services = listServices(v1)
	v1.CloseSend()

	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail("%v", err)
	}
}
