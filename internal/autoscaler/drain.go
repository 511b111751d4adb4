package autoscaler

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// drainTimeout bounds one drain request (the gateway answers 202 at once).
const drainTimeout = 10 * time.Second

// drainNode asks a node to drain through its own server API:
// POST {APIURL}/api/v1/nodes/{id}/drain with the API key. A node that is
// already gone (404, connection refused after it exited) is not an error
// the caller can do anything about; it is returned so that it is logged.
func drainNode(ctx context.Context, hc *http.Client, node cluster.NodeInfo, apiKey string) error {
	if node.APIURL == "" {
		return fmt.Errorf("drain %s: the node record has no API URL", node.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	u := strings.TrimSuffix(node.APIURL, "/") + "/api/v1/nodes/" + url.PathEscape(node.ID) + "/drain"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return fmt.Errorf("drain %s: %w", node.ID, err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("drain %s: %w", node.ID, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("drain %s: POST %s: %s: %s", node.ID, u, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// countCapacity counts the active and warming nodes among nodes.
func countCapacity(nodes []cluster.NodeInfo) int {
	n := 0
	for _, x := range nodes {
		if x.Status == cluster.StatusActive || x.Status == cluster.StatusWarming {
			n++
		}
	}
	return n
}

func newHTTPClient() *http.Client {
	return &http.Client{Timeout: drainTimeout}
}
