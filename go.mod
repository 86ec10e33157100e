module rtgate

go 1.26.8

require (
	github.com/cloudwego/netpoll v0.7.2
	github.com/coder/websocket v1.8.15
	github.com/gobwas/ws v1.5.0
	github.com/gorilla/websocket v1.5.3
	github.com/valyala/bytebufferpool v1.0.0
)

require (
	github.com/bytedance/gopkg v0.1.1 // indirect
	github.com/cloudwego/gopkg v0.1.4 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
