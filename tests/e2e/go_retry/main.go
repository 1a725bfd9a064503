// go_retry: a Go client (Debian's grpc-go and golang/protobuf, stubs from protoc-gen-go)
// that submits one task several times with the same labels and options. Go's protobuf
// encodes map entries in Go's randomised map order, so the retries carry the same
// request with its map entries in different orders. It prints one JSON line:
//   {"encodings": <distinct encodings of the request>, "first_duplicate": bool,
//    "duplicates": <retries answered duplicate>, "errors": [<status of each failure>]}
// Usage: go_retry HOST:PORT TASK_ID RETRIES
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/golang/protobuf/proto"
	"google.golang.org/grpc"
	pb "workerpb/worker/v1"
)

func request(taskID string) *pb.SubmitTaskRequest {
	labels := map[string]string{}
	for i := 0; i < 16; i++ {
		labels[fmt.Sprintf("label-%02d", i)] = fmt.Sprintf("value-%d", i*7)
	}
	return &pb.SubmitTaskRequest{
		TaskId: taskID,
		Function: &pb.FunctionCallConfig{
			Name:    "echo",
			Type:    "map",
			Args:    []byte(`{"data": [1, 2, 3]}`),
			Options: map[string]string{"items": "data"},
		},
		ResultHandler: &pb.ResultHandler{
			Type:    "file",
			Options: map[string]string{"name": taskID + "-out.jsonl"},
		},
		Labels: labels,
	}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go_retry HOST:PORT TASK_ID RETRIES")
		os.Exit(2)
	}
	retries, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer conn.Close()
	client := pb.NewWorkerServiceClient(conn)

	encodings := map[string]bool{}
	out := struct {
		Encodings      int      `json:"encodings"`
		FirstDuplicate bool     `json:"first_duplicate"`
		Duplicates     int      `json:"duplicates"`
		Errors         []string `json:"errors"`
	}{Errors: []string{}}
	for i := 0; i < retries; i++ {
		req := request(os.Args[2])
		b, err := proto.Marshal(req) // the same encoding grpc-go sends
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		encodings[string(b)] = true
		resp, err := client.SubmitTask(ctx, req)
		if err != nil {
			out.Errors = append(out.Errors, err.Error())
			continue
		}
		if i == 0 {
			out.FirstDuplicate = resp.Duplicate
		} else if resp.Duplicate {
			out.Duplicates++
		}
	}
	out.Encodings = len(encodings)
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
