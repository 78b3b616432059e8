// Package awserrtest builds errors as the AWS SDK's clients return them (an
// HTTP answer with or without an error code, a request that could not be
// sent), for the tests of pkg/awserr and of the AWS drivers' error
// translation. It is for tests only.
package awserrtest

import (
	"errors"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Answer is the error a client returns for an HTTP answer with status
// whose body said api: Code's error, an SDK's typed error (types.NoSuchKey,
// ...), or nil for an answer without an error code.
func Answer(status int, api error) error {
	if api == nil {
		api = errors.New("http error")
	}
	return &smithy.OperationError{
		ServiceID:     "Service",
		OperationName: "Operation",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      api,
			},
			RequestID: "req-1",
		},
	}
}

// Code is an answer's error with the AWS error code code.
func Code(code string) error {
	return &smithy.GenericAPIError{Code: code, Message: code + " message"}
}

// NotSent is the error of a request the client could not send because of
// err (a refused connection, a failed TLS handshake).
func NotSent(err error) error {
	return &smithy.OperationError{ServiceID: "Service", OperationName: "Operation", Err: &smithyhttp.RequestSendError{Err: err}}
}
