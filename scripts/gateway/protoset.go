//go:build ignore

// protoset writes the FileDescriptorSet of envoy.service.ratelimit.v3 and
// everything it imports, from go-control-plane's generated code, for ghz
// (--protoset): envoyproxy/ratelimit serves no reflection.
//
//	go run scripts/gateway/protoset.go OUT
package main

import (
	"log"
	"os"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: protoset OUT")
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imps := f.Imports()
		for i := 0; i < imps.Len(); i++ {
			add(imps.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(rls.File_envoy_service_ratelimit_v3_rls_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(os.Args[1], b, 0o644); err != nil {
		log.Fatal(err)
	}
}
