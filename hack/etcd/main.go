// Command etcd is the upstream etcd server, built from its Go module so that
// envtest has a real etcd without downloading a prebuilt binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
