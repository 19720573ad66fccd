package cli

import (
	"os"
	"syscall"
	"unsafe"
)

// isTerminal reports whether v is a terminal. It asks the kernel for the
// terminal settings rather than checking for a character device, because
// /dev/null (a script's usual standard input) is a character device too.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
