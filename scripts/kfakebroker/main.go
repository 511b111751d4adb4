// Command kfakebroker runs kfake (franz-go's in-process Kafka fake) as a
// one-broker Kafka on a TCP port until it is stopped: the Kafka of
// scripts/downstream-throughput.sh on a machine where no Kafka broker
// runs. Topics are created on first use with -partitions partitions.
// Figures measured through it are wsgate's consumer over a fake broker
// held in memory, not what a Kafka cluster would give.
//
//	go run ./scripts/kfakebroker -addr 127.0.0.1:19092 -partitions 3
//
// It prints "listening ADDR" once the broker accepts connections.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:19092", "host:port to listen on")
	partitions := flag.Int("partitions", 3, "partitions of a topic created on first use")
	flag.Parse()
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		fail("-addr %q: %v", *addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		fail("-addr %q: bad port", *addr)
	}
	if *partitions < 1 || *partitions > 1000 {
		fail("-partitions %d: want 1 to 1000", *partitions)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, port))
		}))
	if err != nil {
		fail("%v", err)
	}
	fmt.Println("listening", c.ListenAddrs()[0])
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	c.Close()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kfakebroker: "+format+"\n", args...)
	os.Exit(2)
}
