package broker

import "github.com/gorilla/websocket"

// The websocket close codes the broker sends, with the reasons it gives.
const (
	// CloseSuperseded: another connection associated with the same URI
	// (pcp-broker's 4000, reason "superseded").
	CloseSuperseded = 4000
	// CloseAssociationFailed: the associate_request was refused; the
	// associate_response said why (pcp-broker's 4002, reason "association
	// unsuccessful").
	CloseAssociationFailed = 4002
	// CloseGoingAway: the broker shuts down, or the connection was idle
	// longer than Options.IdleTimeout.
	CloseGoingAway = websocket.CloseGoingAway
	// ClosePolicy: the client's certificate was revoked.
	ClosePolicy = websocket.ClosePolicyViolation
	// CloseTooBig: a message was larger than Options.MaxMessageSize.
	CloseTooBig = websocket.CloseMessageTooBig
	// CloseTryAgainLater: the client did not read its messages fast enough
	// (its write queue filled up).
	CloseTryAgainLater = websocket.CloseTryAgainLater
)
