// Command qm is Quartermaster: a Kubernetes service broker and service
// registry whose operations run as Temporal workflows. One binary serves
// every role; see `qm --help`. Its commands are package cli's.
package main

import (
	"os"

	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/cli"
)

func main() {
	// Started through a link of internal/childproc, this process becomes
	// etcd, kube-apiserver or temporal, bound to die with qm dev.
	childproc.Run()
	os.Exit(cli.Main())
}
