// Command etcd is a plain etcd server: it hands its command line to the
// server module's own entry point, so it accepts exactly the flags of the
// released etcd binary of the version pinned in go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
