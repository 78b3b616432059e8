package broker

import (
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// writeWait bounds one websocket write; a client that takes longer is gone.
const writeWait = 10 * time.Second

// conn is one client's websocket: a reader goroutine (serve) that decodes
// and routes what the client sends, and a writer goroutine that drains a
// bounded queue of encoded frames.
type conn struct {
	b       *Broker
	ws      *websocket.Conn
	cn      string   // the certificate's common name
	serial  *big.Int // the certificate's serial, for revocation sweeps
	version int      // 1 or 2
	// pathType is the client type the URL named (/pcp/<type>, /pcp2/<type>);
	// "" for /pcp/.
	pathType string

	uri      atomic.Pointer[string] // set once associated (v1) or at once (v2)
	lastSeen atomic.Int64           // unix nanoseconds of the last frame read

	out       chan []byte     // encoded messages to write
	closing   chan closeFrame // a close frame to write after them
	quit      chan struct{}   // closed when the reader ends
	closeOnce sync.Once
	kicked    atomic.Bool
}

// closeFrame is the close frame kick asks the writer for.
type closeFrame struct {
	code int
	text string
}

func (c *conn) URI() string {
	if p := c.uri.Load(); p != nil {
		return *p
	}
	return ""
}

func (c *conn) node() string { return c.cn }

func (c *conn) touch() { c.lastSeen.Store(time.Now().UnixNano()) }

func (c *conn) idleSince() time.Time { return time.Unix(0, c.lastSeen.Load()) }

// deliver encodes m for this client's PCP version and queues it.
func (c *conn) deliver(m *message.Message) error {
	data, err := c.b.encodeFor(c.version, c.URI(), m)
	if err != nil {
		return err
	}
	return c.queue(data)
}

var (
	errClosed    = errors.New("the connection is closed")
	errQueueFull = errors.New("the client's write queue is full")
)

// queue adds data to the write queue without blocking. A full queue
// means the client does not read: it is disconnected at once.
func (c *conn) queue(data []byte) error {
	select {
	case <-c.quit:
		return errClosed
	default:
	}
	if c.kicked.Load() {
		return errClosed
	}
	select {
	case c.out <- data:
		return nil
	default:
		if c.kicked.CompareAndSwap(false, true) {
			c.b.log.Warn("pcp: disconnecting a client that does not read its messages", "node", c.cn, "uri", c.URI(), "queued", cap(c.out))
			// Not on the router's goroutine: the close frame waits for
			// the blocked writer (up to a second).
			go c.forceClose(CloseTryAgainLater, "write queue full")
		}
		return errQueueFull
	}
}

// kick closes the connection after what is already queued (a refused
// association's response reaches the client before the close frame).
func (c *conn) kick(code int, reason string) {
	if !c.kicked.CompareAndSwap(false, true) {
		return
	}
	c.closing <- closeFrame{code, reason} // capacity 1, sent once
}

// forceClose sends a close frame now, bypassing the queue, and drops the
// connection.
func (c *conn) forceClose(code int, reason string) {
	c.closeOnce.Do(func() {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
		_ = c.ws.Close()
	})
}

// writeLoop writes queued frames until a close frame or the reader's end.
func (c *conn) writeLoop() {
	defer c.b.wg.Done()
	for {
		select {
		case <-c.quit:
			return
		case f := <-c.closing:
			// What was queued before the kick goes first (a refused
			// association's answer), then the close frame.
			for drained := false; !drained; {
				select {
				case data := <-c.out:
					if !c.write(data) {
						return
					}
				default:
					drained = true
				}
			}
			c.closeOnce.Do(func() {
				_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(f.code, f.text), time.Now().Add(time.Second))
				// The client answers the close frame and the reader
				// ends; a client that does not is dropped shortly.
				t := time.AfterFunc(2*time.Second, func() { _ = c.ws.Close() })
				go func() { <-c.quit; t.Stop() }()
			})
			return
		case data := <-c.out:
			if !c.write(data) {
				return
			}
		}
	}
}

// write writes one message; false when the connection failed.
func (c *conn) write(data []byte) bool {
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	typ := websocket.BinaryMessage
	if c.version == 2 {
		typ = websocket.TextMessage
	}
	if err := c.ws.WriteMessage(typ, data); err != nil {
		c.b.log.Debug("pcp: write failed", "node", c.cn, "uri", c.URI(), "err", err)
		_ = c.ws.Close()
		return false
	}
	return true
}

// serve reads and handles the client's frames until the connection ends,
// then forgets the client.
func (c *conn) serve() {
	defer c.b.wg.Done()
	ws := c.ws
	ws.SetReadLimit(int64(c.b.o.MaxMessageSize))
	ws.SetPingHandler(func(appData string) error {
		c.touch()
		err := ws.WriteControl(websocket.PongMessage, []byte(appData), time.Now().Add(writeWait))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				return nil
			}
			return err
		}
		return nil
	})
	ws.SetPongHandler(func(string) error { c.touch(); return nil })
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			c.logEnd(err)
			break
		}
		c.touch()
		c.b.handleFrame(c, data)
	}
	close(c.quit)
	_ = ws.Close()
	c.b.dropConn(c)
}

func (c *conn) logEnd(err error) {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce):
		c.b.log.Info("pcp: client disconnected", "node", c.cn, "uri", c.URI(), "code", ce.Code, "reason", ce.Text)
	case errors.Is(err, websocket.ErrReadLimit):
		c.b.st.errors.Add(1)
		c.b.log.Warn("pcp: message over the size limit; connection closed (1009)", "node", c.cn, "uri", c.URI(), "limit", c.b.o.MaxMessageSize)
	default:
		c.b.log.Info("pcp: connection ended", "node", c.cn, "uri", c.URI(), "err", err)
	}
}
