// Command etcd is etcd's own server main: a module of its own because etcd 3.6 and
// k8s.io/kubernetes v1.37 require different versions of the etcd client libraries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
