/*
 * A stand-in bcryptprimitives.dll for running posgate's Windows binaries under a Wine that
 * lacks ProcessPrng (Wine 8.0, Debian 12's). Go 1.26 binaries draw their random bytes from
 * ProcessPrng, which Windows 10 / Server 2016 and later export from bcryptprimitives.dll.
 * This test fixture exports ProcessPrng and fills the buffer with RtlGenRandom
 * (advapi32's SystemFunction036), Wine's own system random generator. It is built with
 * mingw-w64 by the end-to-end harness (e2e.SetupWine) and is never shipped: real Windows
 * has the real DLL.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}
