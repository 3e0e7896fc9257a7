// Command feeder serves desired DNS endpoints to external-dns' "connector" source.
//
// external-dns (--source=connector --connector-source-server=HOST:PORT) dials the address once per
// reconciliation loop and decodes one encoding/gob value of type []*endpoint.Endpoint from the stream.
// The feeder answers every connection with the endpoints listed in a JSON file that it re-reads for each
// connection, so an end-to-end test changes the desired state just by rewriting that file.
//
// Only the standard library is used: gob matches struct fields by name and kind, not by type identity,
// so a struct of our own with external-dns' exported field names decodes as theirs.
package main

import (
	"encoding/gob"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
)

// Endpoint mirrors the exported fields of external-dns' endpoint.Endpoint (v0.22) that gob transmits.
// The JSON tags are the ones external-dns' webhook API uses, so the desired-state file reads like a
// webhook payload.
type Endpoint struct {
	DNSName          string                     `json:"dnsName"`
	Targets          []string                   `json:"targets"`
	RecordType       string                     `json:"recordType"`
	SetIdentifier    string                     `json:"setIdentifier"`
	RecordTTL        int64                      `json:"recordTTL"`
	Labels           map[string]string          `json:"labels"`
	ProviderSpecific []ProviderSpecificProperty `json:"providerSpecific"`
}

// ProviderSpecificProperty mirrors external-dns' endpoint.ProviderSpecificProperty.
type ProviderSpecificProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func main() {
	listenHost := flag.String("host", "127.0.0.1", "address to listen on (keep it on loopback)")
	port := flag.Int("port", 0, "TCP port to listen on; 0 picks a free one")
	endpointsFile := flag.String("endpoints", "", "JSON file holding the list of endpoints to serve (required)")
	flag.Parse()
	if *endpointsFile == "" {
		fmt.Fprintln(os.Stderr, "feeder: -endpoints is required")
		os.Exit(2)
	}
	log.SetPrefix("feeder: ")

	listener, err := net.Listen("tcp", net.JoinHostPort(*listenHost, fmt.Sprint(*port)))
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	// The test harness waits for this line to learn the port.
	fmt.Printf("listening on %s\n", listener.Addr())
	os.Stdout.Sync() //nolint:errcheck // best effort; stdout may be a pipe

	for {
		conn, err := listener.Accept()
		if err != nil {
			log.Fatalf("accept: %v", err)
		}
		serve(conn, *endpointsFile)
	}
}

// serve writes the current desired endpoints and closes the connection: external-dns decodes exactly one
// value per dial. On a bad file it writes nothing, so external-dns fails loudly with a decode error
// instead of silently acting on an empty desired state.
func serve(conn net.Conn, endpointsFile string) {
	defer conn.Close()
	endpoints, err := readEndpoints(endpointsFile)
	if err != nil {
		log.Printf("not serving %s: %v", conn.RemoteAddr(), err)
		return
	}
	if err := gob.NewEncoder(conn).Encode(endpoints); err != nil {
		log.Printf("encode to %s: %v", conn.RemoteAddr(), err)
		return
	}
	log.Printf("served %d endpoints to %s", len(endpoints), conn.RemoteAddr())
}

func readEndpoints(path string) ([]*Endpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	endpoints := []*Endpoint{}
	if err := json.Unmarshal(data, &endpoints); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return endpoints, nil
}
