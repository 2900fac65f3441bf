package server

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPI is the OpenAPI 3.1 description of every API route, written by hand
// and checked against the router by TestOpenAPICoversRoutes.
//
//go:embed openapi.json
var openAPI []byte

// openAPIDocument serves the document as it is embedded.
func openAPIDocument(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderCacheControl, "no-cache")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPI)
}
