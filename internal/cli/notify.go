package cli

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// sdNotify sends state (newline-separated assignments such as "READY=1")
// to the service manager's notification socket named by socket, the value
// of $NOTIFY_SOCKET: a path, or an abstract socket when it starts with "@".
// An empty socket does nothing and returns nil. This is the sd_notify(3)
// datagram protocol; systemd's Type=notify services wait for READY=1.
func sdNotify(socket, state string) error {
	if socket == "" {
		return nil
	}
	if !strings.HasPrefix(socket, "/") && !strings.HasPrefix(socket, "@") {
		return fmt.Errorf("NOTIFY_SOCKET %q is neither a path nor an abstract socket (@name)", socket)
	}
	addr := &net.UnixAddr{Name: socket, Net: "unixgram"}
	if socket[0] == '@' {
		addr.Name = "\x00" + socket[1:]
	}
	c, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", socket, err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", socket, err)
	}
	return nil
}
